package asynclookup.sql;

import java.math.BigInteger;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.Statistics;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.View;

/**
 * Spark's estimate of a join input's rows, which the rule tells the table function: its {@code
 * analyze} (Python) judges the lookup table's {@code strategy} by it ({@code
 * lookup_source.spark.strategy.sql_join_decision}); only the JVM can read the estimate.
 */
final class InputRows {
  private InputRows() {}

  /**
   * Spark's estimate of the rows of {@code plan}, or -1 when it cannot tell: the row count of
   * its statistics, or of the nearest node below it that has one through nodes that never add
   * rows (projections, filters, aliases, views: an upper bound), else its size in bytes over
   * the width of a row.
   */
  static long of(LogicalPlan plan) {
    try {
      for (LogicalPlan p = plan; ; p = p.children().head()) {
        Statistics stats = p.stats();
        if (stats.rowCount().isDefined()) {
          BigInteger count = stats.rowCount().get().bigInteger();
          return count.min(BigInteger.valueOf(Long.MAX_VALUE)).longValue();
        }
        if (!(p instanceof Project
            || p instanceof Filter
            || p instanceof SubqueryAlias
            || p instanceof View
            || p instanceof Sort)) {
          break;
        }
      }
      Statistics stats = plan.stats();
      BigInteger size = stats.sizeInBytes().bigInteger();
      if (size.bitLength() >= 62) { // Spark's "unknown" is about Long.MaxValue bytes
        return -1;
      }
      long width = 0;
      for (Attribute a : Scala.list(plan.output())) {
        width += a.dataType().defaultSize();
      }
      return size.divide(BigInteger.valueOf(Math.max(8, width))).longValue();
    } catch (RuntimeException error) {
      return -1;
    }
  }
}
