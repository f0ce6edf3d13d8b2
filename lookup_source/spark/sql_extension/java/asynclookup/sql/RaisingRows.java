package asynclookup.sql;

import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Deduplicate;
import org.apache.spark.sql.catalyst.plans.logical.Distinct;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import scala.Option;

/**
 * Expressions that may raise an error ({@link RaiseFree}) where Spark's optimizer decides on
 * which rows, or whether at all, they run, so that a rewrite would raise where Spark's join does
 * not, or answer where it raises:
 *
 * <ul>
 *   <li>a {@code WHERE} above the join: Spark pushes its conditions below the join, into the
 *       table's scan (every row of the table) or the input (every input row), where the rewrite
 *       keeps them above the lookups (the rows that matched): such a join stays Spark's;
 *   <li>an input column no one reads: Spark prunes it, so the rewrite hands the table function
 *       only the input columns the query reads ({@link #needed});
 *   <li>the input's columns and filters, and the join's keys, on rows Spark may never read: a
 *       {@code LIMIT} pushed into a LEFT JOIN's input, an outer join removed under a {@code
 *       DISTINCT} or an aggregate, a disjunction of the ON condition pushed into the input.
 *       Such a join stays Spark's when any of them may raise.
 * </ul>
 *
 * What the rewrite itself made (a join below, rewritten) is not looked into: its input was
 * judged when it was rewritten.
 */
final class RaisingRows {
  private RaisingRows() {}

  /** On a node: why a condition above it may raise. */
  static final TreeNodeTag<String> ABOVE = new TreeNodeTag<>("asynclookup.raisingAbove");
  /** On a node: the ids of the attributes the nodes above it read (and the query's output;
   * every column of a node read otherwise than by its expressions, see {@link #NARROWING}). */
  static final TreeNodeTag<Set<Long>> READ_ABOVE = new TreeNodeTag<>("asynclookup.readAbove");
  /** On a node: an operator above it by which Spark may read fewer of its rows. */
  static final TreeNodeTag<String> FEWER_ROWS = new TreeNodeTag<>("asynclookup.fewerRows");

  /** Tags each node of {@code plan} with what the nodes above it do (see the tags). */
  static void mark(LogicalPlan plan) {
    Set<Long> output = new HashSet<>();
    for (Attribute a : Scala.list(plan.output())) {
      output.add(a.exprId().id());
    }
    mark(plan, null, output, null);
  }

  private static void mark(LogicalPlan plan, String above, Set<Long> read, String fewer) {
    set(plan, ABOVE, above);
    set(plan, FEWER_ROWS, fewer);
    plan.setTagValue(READ_ABOVE, read);
    String below = above;
    if (below == null && plan instanceof Filter) {
      for (Expression c : Expressions.conjuncts(((Filter) plan).condition())) {
        if (!RaiseFree.neverRaises(c)) {
          below =
              "a condition above the join may raise an error, which Spark may evaluate below"
                  + " the join, on rows the lookups never fetch: "
                  + c.sql();
          break;
        }
      }
    }
    String fewerBelow = fewer;
    if (fewerBelow == null) {
      if (plan instanceof GlobalLimit || plan instanceof LocalLimit) {
        fewerBelow = "a LIMIT";
      } else if (plan instanceof Aggregate
          || plan instanceof Distinct
          || plan instanceof Deduplicate) {
        fewerBelow = "a DISTINCT or an aggregate";
      } else if (plan.getClass().getSimpleName().equals("Offset")) {
        fewerBelow = "an OFFSET";
      }
    }
    Set<Long> readBelow = new HashSet<>(read);
    for (Attribute a : Scala.list(plan.references().toSeq())) {
      readBelow.add(a.exprId().id());
    }
    if (!NARROWING.contains(plan.getClass().getSimpleName())) {
      // a node that reads its children's columns otherwise than by its expressions (a UNION by
      // place, a DISTINCT every column, a CTE's definition through its references): all read
      for (LogicalPlan child : Scala.list(plan.children())) {
        for (Attribute a : Scala.list(child.output())) {
          readBelow.add(a.exprId().id());
        }
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      mark(child, below, readBelow, fewerBelow);
    }
  }

  /**
   * The operators whose answer depends on their children's columns only through their own
   * expressions, the rest passed up under the same ids (or dropped): below them, a column no
   * one reads is one their expressions and the nodes above them do not read.
   */
  private static final Set<String> NARROWING =
      Set.of(
          "Project",
          "Aggregate",
          "Filter",
          "Sort",
          "GlobalLimit",
          "LocalLimit",
          "Offset",
          "SubqueryAlias",
          "Join",
          "Window",
          "Generate",
          "Sample",
          "Repartition",
          "RepartitionByExpression");

  private static void set(LogicalPlan plan, TreeNodeTag<String> tag, String value) {
    if (value != null) {
      plan.setTagValue(tag, value);
    } else {
      plan.unsetTagValue(tag);
    }
  }

  /** Throws {@link NotRewritten} when {@code node} (the join, or the WHERE that writes it)
   * is under a condition that may raise. */
  static void checkAbove(LogicalPlan node) {
    Option<String> why = node.getTagValue(ABOVE);
    if (why.isDefined()) {
      throw new NotRewritten(why.get());
    }
  }

  /**
   * The ids of the input columns the query reads, above {@code node} (the join, or the WHERE
   * that writes it) or in it; null when not known (every column is then needed).
   */
  static Set<Long> needed(LogicalPlan node) {
    Option<Set<Long>> read = node.getTagValue(READ_ABOVE);
    if (read.isEmpty()) {
      return null;
    }
    Set<Long> needed = new HashSet<>(read.get());
    for (Attribute a : Scala.list(node.references().toSeq())) {
      needed.add(a.exprId().id());
    }
    return needed;
  }

  /** Throws {@link NotRewritten} when Spark may read fewer input rows than the rewrite (see
   * the class doc) and a key, or what the input computes that the query reads, may raise. */
  static void checkInput(
      LogicalPlan node, LogicalPlan input, Expression condition, Expression[] keys) {
    Option<String> fewer = node.getTagValue(FEWER_ROWS);
    String because = fewer.isDefined() ? fewer.get() + " above the join" : null;
    if (because == null) {
      for (Expression c : Expressions.conjuncts(condition)) {
        if (c instanceof Or) {
          because = "a disjunction in the join's condition";
          break;
        }
      }
    }
    if (because == null) {
      return;
    }
    String raises = null;
    for (Expression key : keys) {
      if (!RaiseFree.neverRaises(key)) {
        raises = key.sql();
        break;
      }
    }
    if (raises == null) {
      raises = inInput(input);
    }
    if (raises != null) {
      throw new NotRewritten(
          "the input computes what may raise an error, where Spark may read fewer rows ("
              + because
              + "): "
              + raises);
    }
  }

  private static String inInput(LogicalPlan plan) {
    if (plan.getTagValue(LookupJoinRule.REPLACED).isDefined()) {
      return null;
    }
    if (plan instanceof Project || plan instanceof Aggregate) {
      Option<Set<Long>> read = plan.getTagValue(READ_ABOVE);
      for (Expression e : Scala.list(plan.expressions())) {
        boolean isRead =
            read.isEmpty()
                || !(e instanceof NamedExpression)
                || read.get().contains(((NamedExpression) e).exprId().id());
        if (isRead && !RaiseFree.neverRaises(e)) {
          return e.sql();
        }
      }
    } else if (plan instanceof Filter) {
      Expression c = ((Filter) plan).condition();
      if (!RaiseFree.neverRaises(c)) {
        return c.sql();
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      String why = inInput(child);
      if (why != null) {
        return why;
      }
    }
    return null;
  }
}
