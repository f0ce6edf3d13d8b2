package asynclookup.sql;

import java.util.List;

/**
 * What the rule tells the table function of a JOIN it rewrote, as the call's last argument
 * (JSON; read by {@code lookup_source.spark.join_checks.RuleFacts}): Spark's estimate of the
 * input's rows (absent when Spark cannot tell), by which the table's {@code strategy} decides,
 * and the table's key columns as the rule took them, which the table function checks against
 * the data source's (a disagreement leaves the join to Spark), and the rewrite's own id, which
 * the metadata key of the function's decision carries.
 */
final class RuleFacts {
  private RuleFacts() {}

  static String json(long inputRows, List<String> tableKeys, String rewrite) {
    StringBuilder out = new StringBuilder("{");
    out.append(TableFunctions.jsonString(Contract.FACT_REWRITE)).append(':');
    out.append(TableFunctions.jsonString(rewrite)).append(',');
    if (inputRows >= 0) {
      out.append(TableFunctions.jsonString(Contract.FACT_INPUT_ROWS)).append(':').append(inputRows);
      out.append(',');
    }
    out.append(TableFunctions.jsonString(Contract.FACT_TABLE_KEYS)).append(":[");
    for (int i = 0; i < tableKeys.size(); i++) {
      out.append(i == 0 ? "" : ",").append(TableFunctions.jsonString(tableKeys.get(i)));
    }
    return out.append("]}").toString();
  }
}
