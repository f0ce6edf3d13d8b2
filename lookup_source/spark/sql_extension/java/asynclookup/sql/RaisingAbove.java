package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;

/**
 * The conditions of the {@code WHERE}s above a node that may raise an error, each with the
 * node's columns it reads (followed down through projections, as Spark pushes a condition
 * down): where Spark evaluates such a condition decides whether a rewrite of the join below
 * raises as Spark's join does ({@link #why}).
 */
final class RaisingAbove {
  static final RaisingAbove NONE = new RaisingAbove(List.of());

  /** Above these, a condition is pushed down by Spark as it is (or renamed, by a Project). */
  private static final Set<String> THROUGH = Set.of("Filter", "SubqueryAlias", "View", "Sort");

  private static final class Condition {
    final String sql;
    final Set<Long> reads;

    Condition(String sql, Set<Long> reads) {
      this.sql = sql;
      this.reads = reads;
    }
  }

  private final List<Condition> conditions;

  private RaisingAbove(List<Condition> conditions) {
    this.conditions = conditions;
  }

  boolean isEmpty() {
    return conditions.isEmpty();
  }

  /** These and {@code filter}'s own conditions that may raise, as its child sees them. */
  RaisingAbove plus(Filter filter) {
    List<Condition> more = new ArrayList<>(conditions);
    for (Expression c : Expressions.conjuncts(filter.condition())) {
      if (!RaiseFree.neverRaises(c)) {
        more.add(new Condition(c.sql(), Expressions.readIds(c)));
      }
    }
    return new RaisingAbove(more);
  }

  /** These as the child of {@code plan} sees them, or null where Spark's pushing them down
   * through it is not followed (then the join below stays Spark's). */
  RaisingAbove through(LogicalPlan plan) {
    if (conditions.isEmpty() || THROUGH.contains(plan.getClass().getSimpleName())) {
      return this;
    }
    if (!(plan instanceof Project)) {
      return null;
    }
    Map<Long, Set<Long>> made = new HashMap<>();
    for (NamedExpression e : Scala.list(((Project) plan).projectList())) {
      if (e instanceof Alias) {
        made.put(e.exprId().id(), Expressions.readIds(((Alias) e).child()));
      }
    }
    List<Condition> renamed = new ArrayList<>();
    for (Condition c : conditions) {
      Set<Long> reads = new HashSet<>();
      for (Long id : c.reads) {
        reads.addAll(made.getOrDefault(id, Set.of(id)));
      }
      renamed.add(new Condition(c.sql, reads));
    }
    return new RaisingAbove(renamed);
  }

  /** The first condition's text (the reason a join below stays Spark's), or null. */
  String first() {
    return conditions.isEmpty() ? null : conditions.get(0).sql;
  }

  /**
   * Why a join below, whose table's columns are {@code table} and input's {@code input}, must
   * stay Spark's, or null. Spark evaluates a condition on the table's columns alone in the
   * table's scan (rows the lookups never fetch), and one on the input's alone on every input
   * row, where the rewrite evaluates both on its answer: the same rows only for the input's
   * columns of a LEFT JOIN ({@code everyInputRow}), which answers each input row. A condition
   * on both sides is evaluated on the join's rows both ways.
   */
  String why(Set<Long> table, Set<Long> input, boolean everyInputRow) {
    for (Condition c : conditions) {
      boolean readsTable = false;
      boolean readsInput = false;
      boolean unknown = c.reads.isEmpty();
      for (Long id : c.reads) {
        readsTable |= table.contains(id);
        readsInput |= input.contains(id);
        unknown |= !table.contains(id) && !input.contains(id);
      }
      if (unknown || (readsTable && !readsInput)) {
        return "a condition above the join may raise an error, which Spark may evaluate below"
            + " the join, on rows the lookups never fetch: "
            + c.sql;
      }
      if (!readsTable && !everyInputRow) {
        return "a condition above the join on the input's columns may raise an error, which"
            + " Spark evaluates on every input row, the lookups on those that match: "
            + c.sql;
      }
    }
    return null;
  }
}
