package asynclookup.sql;

import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationRef;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Whether a plan gives the same rows each time it is read ({@link KeysFirstPlan} reads its
 * input twice: its keys, then the join). Not so with a non-deterministic expression, a limit, an
 * offset or a sample (which rows it keeps may differ), a window (a {@code row_number()} over ties),
 * a common table expression (whose body the rewrite does not see), or a stream.
 */
final class ReadTwice {
  private ReadTwice() {}

  private static final Set<String> UNSTABLE =
      Set.of(
          "GlobalLimit",
          "LocalLimit",
          "Limit",
          "Tail",
          "Offset",
          "Sample",
          "Window",
          "WindowGroupLimit",
          "UnionLoop",
          "UnionLoopRef");

  /** Why {@code plan} may give other rows on a second read, or null. */
  static String why(LogicalPlan plan) {
    if (plan.isStreaming()) {
      return "it is a stream";
    }
    String name = plan.getClass().getSimpleName();
    if (UNSTABLE.contains(name)) {
      return "its " + name + " may keep other rows the second time";
    }
    if (plan instanceof CTERelationRef) {
      return "it reads a common table expression";
    }
    for (Expression e : Scala.list(plan.expressions())) {
      if (!e.deterministic()) {
        return "it is not deterministic: " + e.sql();
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      String why = why(child);
      if (why != null) {
        return why;
      }
    }
    return null;
  }
}
