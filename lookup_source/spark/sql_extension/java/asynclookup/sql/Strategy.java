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
 * Whether a join against a lookup table runs as lookups, as the table's {@code strategy} says:
 * {@code lookup} (the default) always; {@code scan} and {@code broadcast} never (Spark scans the
 * table and joins it); {@code auto} when the input is small enough for lookups to cost less than
 * a scan and a join — {@code strategy.lookup.max-input-rows}, which register_lookup_table works
 * out from the table's size and the connector's costs — by Spark's estimate of the input's rows.
 */
final class Strategy {
  final boolean lookups;
  final String reason;

  private Strategy(boolean lookups, String reason) {
    this.lookups = lookups;
    this.reason = reason;
  }

  static Strategy of(LookupTable table, LogicalPlan input) {
    switch (table.strategy) {
      case Contract.STRATEGY_LOOKUP:
        return new Strategy(true, "strategy=lookup");
      case Contract.STRATEGY_SCAN:
      case Contract.STRATEGY_BROADCAST:
        return new Strategy(
            false, "strategy=" + table.strategy + ": Spark scans the table and joins it");
      case Contract.STRATEGY_AUTO:
        return auto(table, input);
      default:
        throw new NotRewritten("strategy=" + table.strategy + " is not one the rewrite knows");
    }
  }

  private static Strategy auto(LookupTable table, LogicalPlan input) {
    if (table.maxLookupRows < 0) {
      return new Strategy(
          true, "strategy=auto and no strategy.lookup.max-input-rows: lookups (the table's size "
              + "is unknown, or only lookups can read it)");
    }
    long rows = inputRows(input);
    if (rows < 0) {
      return new Strategy(true, "strategy=auto: the input's size is unknown: lookups");
    }
    String sizes =
        String.format(
            "the input ~%,d rows, lookups up to %,d (strategy.lookup.max-input-rows)",
            rows, table.maxLookupRows);
    return rows <= table.maxLookupRows
        ? new Strategy(true, "strategy=auto: lookups: " + sizes)
        : new Strategy(false, "strategy=auto: a scan and Spark's join: " + sizes);
  }

  /**
   * Spark's estimate of the rows of {@code plan}, or -1 when it cannot tell: the row count of
   * its statistics, or of the nearest node below it that has one through nodes that never add
   * rows (projections, filters, aliases, views: an upper bound), else its size in bytes over
   * the width of a row.
   */
  static long inputRows(LogicalPlan plan) {
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
