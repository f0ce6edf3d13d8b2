package asynclookup.sql;

import java.util.function.Function;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=asynclookup.sql.AsyncLookupSqlExtensions}: a SQL JOIN against an
 * asynclookup lookup table runs as async lookups (its table function) instead of a full scan and a
 * Spark join.
 *
 * <p>Two parts, each with its own switch (read when a session starts, default on):
 *
 * <ul>
 *   <li>{@code spark.asynclookup.sql.extension.joinRewrite.enabled}: the analyzer rule {@link
 *       LookupJoinRule}, and {@link Views.Definitions}, which notes a view's definition first;
 *   <li>{@code spark.asynclookup.sql.extension.filterPushdown.enabled}: the optimizer rule {@link
 *       FilterLookupInput}, which filters a lookup's input rows before they are looked up.
 * </ul>
 *
 * A part that cannot start (another Spark than the one it was built for, a missing class) is
 * skipped with one log line: the session always starts, and its queries keep Spark's plans.
 */
public final class AsyncLookupSqlExtensions
    extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  static final Logger LOG = LoggerFactory.getLogger("asynclookup.sql");

  /** The oldest Spark whose Python table functions take Arrow batches (Spark 4.1). */
  static final int[] SINCE = {4, 1};

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectHintResolutionRule( // (before any subquery is analyzed: Views)
        part("joinRewrite", Settings.PART_JOIN_REWRITE, session -> new Views.Definitions()));
    extensions.injectResolutionRule(
        part("joinRewrite", Settings.PART_JOIN_REWRITE, LookupJoinRule::new));
    extensions.injectOptimizerRule(
        part("filterPushdown", Settings.PART_FILTER_PUSHDOWN, session -> new FilterLookupInput()));
    return BoxedUnit.UNIT;
  }

  private static scala.Function1<SparkSession, Rule<LogicalPlan>> part(
      String name, String setting, Function<SparkSession, Rule<LogicalPlan>> make) {
    return new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        try {
          String version = session.version();
          if (!supported(version)) {
            LOG.warn(
                "asynclookup SQL extension: SQL joins as lookups need Spark >= {}.{} (this is"
                    + " Spark {}): part {} skipped",
                SINCE[0],
                SINCE[1],
                version,
                name);
            return new Unchanged(name);
          }
          String enabled = session.sparkContext().conf().get(setting, "true");
          if ("false".equalsIgnoreCase(enabled.trim())) {
            LOG.info("asynclookup SQL extension: part {} off ({}=false)", name, setting);
            return new Unchanged(name);
          }
          return make.apply(session);
        } catch (Throwable error) { // never break a session: skip the part, say why
          LOG.warn("asynclookup SQL extension: part {} skipped: {}", name, error.toString());
          return new Unchanged(name);
        }
      }
    };
  }

  static boolean supported(String version) {
    String[] parts = version.split("[.-]");
    try {
      int major = Integer.parseInt(parts[0]);
      int minor = parts.length > 1 ? Integer.parseInt(parts[1]) : 0;
      return major > SINCE[0] || (major == SINCE[0] && minor >= SINCE[1]);
    } catch (NumberFormatException error) {
      return false;
    }
  }

  /** A part that is off or could not start: leaves every plan as it is. */
  static final class Unchanged extends Rule<LogicalPlan> {
    private final String part;

    Unchanged(String part) {
      this.part = part;
    }

    @Override
    public String ruleName() {
      return "asynclookup." + part + " (off)";
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      return plan;
    }
  }
}
