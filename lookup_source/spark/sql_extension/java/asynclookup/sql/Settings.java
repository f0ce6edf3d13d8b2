package asynclookup.sql;

import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.internal.SQLConf;

/**
 * The extension's settings. Each injected part has a switch read once, when a session starts
 * ({@code spark.asynclookup.sql.extension.<part>.enabled}); the rewrite itself can be turned off
 * at run time ({@code spark.asynclookup.sql.joins.enabled=false}).
 */
final class Settings {
  private Settings() {}

  /** At run time: whether a JOIN against a lookup table is rewritten into lookups. */
  static final String JOINS_ENABLED = "spark.asynclookup.sql.joins.enabled";

  /** When the session starts: inject the analyzer rule that rewrites joins. */
  static final String PART_JOIN_REWRITE = "spark.asynclookup.sql.extension.joinRewrite.enabled";

  /** When the session starts: inject the optimizer rule that filters a lookup's input. */
  static final String PART_FILTER_PUSHDOWN =
      "spark.asynclookup.sql.extension.filterPushdown.enabled";

  /** The switch as the session has it (a view's text is analyzed under the view's own
   * configuration, which holds Spark's settings only). */
  static boolean joinsEnabled(SparkSession session) {
    return enabled(session.sessionState().conf());
  }

  static boolean joinsEnabled() {
    return enabled(SQLConf.get());
  }

  private static boolean enabled(SQLConf conf) {
    return !"false".equalsIgnoreCase(conf.getConfString(JOINS_ENABLED, "true").trim());
  }
}
