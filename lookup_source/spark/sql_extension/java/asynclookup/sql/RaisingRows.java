package asynclookup.sql;

import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;

/**
 * Expressions that may raise an error ({@link RaiseFree}) where Spark's optimizer decides on
 * which rows, or whether at all, they run, so that a rewrite would raise where Spark's join does
 * not, or answer where it raises. Such a join stays Spark's:
 *
 * <ul>
 *   <li>under a {@code WHERE}, or another join's condition, that may raise: Spark pushes its
 *       conditions below the join, into the table's scan (every row of the table) or the input
 *       (every input row), where the rewrite keeps them above the lookups (the rows that
 *       matched) — a {@code WHERE} on both sides, or on the input's columns above a LEFT JOIN,
 *       is evaluated on the same rows both ways ({@link RaisingAbove});
 *   <li>when the input computes a column no one reads that may raise: Spark prunes it, so never
 *       computes it, where the rewrite hands every input column to the table function;
 *   <li>when a key, or what the input computes, may raise and Spark may read fewer of the
 *       input's rows: a {@code LIMIT} pushed into a LEFT JOIN's input, an outer join removed
 *       under a {@code DISTINCT}, an aggregate, {@code INTERSECT} or {@code EXCEPT}, a
 *       disjunction of the ON condition pushed into the input.
 * </ul>
 *
 * What the nodes above each node do is read once per pass of the rule ({@link #of}), for the
 * nodes of that pass's plan (by identity: nothing is written on the plan, which other queries
 * may share); a node the pass did not see (a copy made above a join rewritten in the same pass)
 * is judged in the analyzer's next pass. What the rewrite itself made (a join below, rewritten)
 * is not looked into: its input was judged when it was rewritten. Operators a DataFrame adds
 * after its query was analyzed ({@code spark.sql(...).limit(1)}) are not seen.
 */
final class RaisingRows {
  /** A node's {@link #above} while a node above it is not resolved yet: judged later. */
  private static final String PENDING = "";

  /**
   * The operators whose answer depends on their children's columns only through their own
   * expressions, the rest passed up under the same ids (or dropped): below them, a column no
   * one reads is one their expressions and the nodes above them do not read. Above any other
   * (a UNION reads by place, a DISTINCT every column), every column counts as read.
   */
  private static final Set<String> NARROWING =
      Set.of(
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

  /**
   * Statements around a query that stay unresolved while the analyzer resolves the query (an
   * {@code INSERT}'s target is resolved after): below them, every column counts as read.
   */
  private static final Set<String> WRAPPERS =
      Set.of(
          "InsertIntoStatement",
          "InsertIntoDir",
          "CreateTableAsSelect",
          "ReplaceTableAsSelect",
          "CreateTableAsSelectStatement",
          "ReplaceTableAsSelectStatement",
          "AppendData",
          "OverwriteByExpression",
          "OverwritePartitionsDynamic");

  private static final class Mark {
    /** Why a condition above may raise (PENDING: not known yet), or null. */
    final String above;
    /** The ids of the node's columns the nodes above read; null: all (not known). */
    final Set<Long> read;
    /** An operator above by which Spark may read fewer of the node's rows, or null. */
    final String fewer;
    /** The conditions of the WHEREs above that may raise, as the node sees them. */
    final RaisingAbove raising;

    Mark(String above, Set<Long> read, String fewer, RaisingAbove raising) {
      this.above = above;
      this.read = read;
      this.fewer = fewer;
      this.raising = raising;
    }
  }

  private static final String CONDITION_ABOVE =
      "a condition above the join may raise an error, which Spark may evaluate below the join,"
          + " on rows the lookups never fetch: ";

  /** What a query reading a view may do to it, unseen. */
  private static final String IN_VIEW = "a query reading the view (which may read fewer rows)";

  private final Map<LogicalPlan, Mark> marks = new IdentityHashMap<>();

  private RaisingRows() {}

  /**
   * What the nodes above each node of {@code plan} do. A view's text ({@code inView}) is read by
   * a query not seen here, which may read fewer of its rows or not all of its columns: a key or
   * an input column that may raise keeps Spark's join there.
   */
  static RaisingRows of(LogicalPlan plan, boolean inView) {
    RaisingRows rows = new RaisingRows();
    Set<Long> output = null;
    if (inView) {
      output = new HashSet<>(); // (none known to be read)
    } else if (plan.resolved()) {
      output = Expressions.ids(Scala.list(plan.output()));
    }
    rows.mark(plan, new Mark(null, output, inView ? IN_VIEW : null, RaisingAbove.NONE));
    return rows;
  }

  private void mark(LogicalPlan plan, Mark mark) {
    marks.put(plan, mark);
    boolean resolved = plan.resolved();
    String above = mark.above != null ? mark.above : raisingCondition(plan, resolved);
    if (!resolved && above == null && !WRAPPERS.contains(plan.getClass().getSimpleName())) {
      above = PENDING; // what it reads is not known yet: judged once it is resolved
    }
    String fewer = mark.fewer != null ? mark.fewer : fewerRows(plan);
    RaisingAbove raising =
        resolved && plan instanceof Filter
            ? mark.raising.plus((Filter) plan)
            : mark.raising.through(plan);
    if (raising == null) { // (pushed down through an operator this rule does not follow)
      above = above != null ? above : CONDITION_ABOVE + mark.raising.first();
      raising = RaisingAbove.NONE;
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      mark(child, new Mark(above, resolved ? readBelow(plan, mark.read) : null, fewer, raising));
    }
  }

  /** Why {@code plan}'s own condition may raise below it, or null. */
  private static String raisingCondition(LogicalPlan plan, boolean resolved) {
    if (plan instanceof Filter) { // (judged by what it reads: RaisingAbove)
      return resolved ? null : PENDING;
    }
    if (!(plan instanceof Join) || ((Join) plan).condition().isEmpty()) {
      return null;
    }
    if (!resolved) {
      return PENDING;
    }
    for (Expression c : Expressions.conjuncts(((Join) plan).condition().get())) {
      if (!RaiseFree.neverRaises(c)) {
        return CONDITION_ABOVE + c.sql();
      }
    }
    return null;
  }

  private static String fewerRows(LogicalPlan plan) {
    switch (plan.getClass().getSimpleName()) {
      case "GlobalLimit":
      case "LocalLimit":
      case "Offset":
        return "a LIMIT";
      case "Aggregate":
      case "Distinct":
      case "Deduplicate":
      case "Intersect":
      case "Except":
        return "a DISTINCT, an aggregate, INTERSECT or EXCEPT";
      default:
        return null;
    }
  }

  /** The ids of the children's columns that {@code plan} and the nodes above it read. */
  private static Set<Long> readBelow(LogicalPlan plan, Set<Long> read) {
    if (read == null) {
      return null;
    }
    Set<Long> below = new HashSet<>();
    if (plan instanceof Project || plan instanceof Aggregate) {
      // what its read columns are made of (an aggregate's groups always)
      for (Expression e : Scala.list(plan.expressions())) {
        boolean item = e instanceof NamedExpression;
        boolean isRead = item && read.contains(((NamedExpression) e).exprId().id());
        boolean grouping =
            plan instanceof Aggregate
                && Scala.list(((Aggregate) plan).groupingExpressions()).contains(e);
        if (!item || isRead || grouping) {
          below.addAll(Expressions.readIds(e));
        }
      }
      return below;
    }
    below.addAll(read);
    below.addAll(Expressions.ids(Scala.list(plan.references().toSeq())));
    if (!NARROWING.contains(plan.getClass().getSimpleName())) {
      for (LogicalPlan child : Scala.list(plan.children())) {
        below.addAll(Expressions.ids(Scala.list(child.output())));
      }
    }
    return below;
  }

  /** Whether this pass can judge {@code node} (else: the analyzer's next pass). */
  boolean judges(LogicalPlan node) {
    Mark mark = marks.get(node);
    return mark != null && !PENDING.equals(mark.above);
  }

  /** Throws {@link NotRewritten} when {@code node} (the join {@code shape}, or the WHERE that
   * writes it) is under a condition that may raise where Spark would evaluate it on other rows
   * than the rewrite ({@link RaisingAbove#why}). */
  void checkAbove(LogicalPlan node, JoinShape shape) {
    Mark mark = marks.get(node);
    if (mark == null) {
      return;
    }
    if (mark.above != null) {
      throw new NotRewritten(mark.above);
    }
    Set<Long> table = Expressions.ids(shape.side.output);
    Set<Long> input = Expressions.ids(Scala.list(shape.input.output()));
    String why = mark.raising.why(table, input, shape.kind == JoinShape.Kind.LEFT);
    if (why != null) {
      throw new NotRewritten(why);
    }
  }

  /** Throws {@link NotRewritten} when the input computes a column no one reads that may raise,
   * or Spark may read fewer input rows than the rewrite and a key, or what the input computes
   * that the query reads, may raise. */
  void checkInput(LogicalPlan node, LogicalPlan input, Expression condition, Expression[] keys) {
    String unread = raisingIn(input, false);
    if (unread != null) {
      throw new NotRewritten(
          "the input computes a column no one reads that may raise an error (Spark prunes it,"
              + " so never computes it): "
              + unread);
    }
    Mark mark = marks.get(node);
    String because = mark != null && mark.fewer != null ? mark.fewer + " above the join" : null;
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
      raises = raisingIn(input, true);
    }
    if (raises != null) {
      throw new NotRewritten(
          "the input computes what may raise an error, where Spark may read fewer rows ("
              + because
              + "): "
              + raises);
    }
  }

  /** With {@code read}, what {@code plan} computes that is read (or filters by) and may raise;
   * else a column of a projection or aggregate in it that no one reads and may raise. */
  private String raisingIn(LogicalPlan plan, boolean read) {
    if (plan.getTagValue(LookupJoinRule.REPLACED).isDefined()) {
      return null;
    }
    Mark mark = marks.get(plan);
    if (plan instanceof Project || plan instanceof Aggregate) {
      for (Expression e : Scala.list(plan.expressions())) {
        boolean isRead =
            mark == null
                || mark.read == null
                || !(e instanceof NamedExpression)
                || mark.read.contains(((NamedExpression) e).exprId().id());
        if (isRead == read && !RaiseFree.neverRaises(e)) {
          return e.sql();
        }
      }
    } else if (read && plan instanceof Filter) {
      Expression c = ((Filter) plan).condition();
      if (!RaiseFree.neverRaises(c)) {
        return c.sql();
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      String why = raisingIn(child, read);
      if (why != null) {
        return why;
      }
    }
    return null;
  }
}
