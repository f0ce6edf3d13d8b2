package asynclookup.sql;

/**
 * The names the rule shares with Python, generated from {@code
 * lookup_source.spark.sql_extension.contract} when the jar is built. Do not edit: change
 * them in Python (a test fails when this file is not what Python generates).
 */
final class Contract {
  private Contract() {}

  static final String SOURCE = "asynclookup";
  static final String OPTION_CONNECTOR = "connector";
  static final String OPTION_KEYS = "keys";
  static final String OPTION_KEY_COLUMN = "key.column";
  static final String OPTION_JOIN_FUNCTION = "sql.join.function";
  static final String FUNCTION_CONNECTOR = "function";
  static final String ERROR_COLUMN = "_lookup_error";
  static final String KEY_METADATA = "asynclookup.key";
  static final String MODE_SQL_JOIN = "sql-join";
  static final String VETO_COLUMN = "__asynclookup_veto";
  static final String VETO_REASON = "reason";
  static final String COLUMN_PREFIX = "__asynclookup_";
  static final String DECISION_LOOKUP = "lookup";
  static final String DECISION_SPARK = "spark";
  static final String DECISION_METADATA = "asynclookup.decision";
  static final String FACT_INPUT_ROWS = "input_rows";
  static final String FACT_TABLE_KEYS = "table_keys";
  static final String FACT_REWRITE = "rewrite";
  static final String FACTORY_MODULE = "lookup_source.spark.sql_functions";
  static final String FACTORY = "join_function";
  static final int ARROW_UDTF = 302;
  static final String HOW_LEFT = "left";
  static final String HOW_INNER = "inner";
  static final String HOW_SEMI = "semi";
  static final String HOW_ANTI = "anti";
  static final String HOW_NOT_IN = "not-in";
  static final String NOT_IN_NULL_COLUMN = "__asynclookup_not_in_null";
  static final String OP_EQ = "eq";
  static final String OP_NE = "ne";
  static final String OP_LT = "lt";
  static final String OP_LE = "le";
  static final String OP_GT = "gt";
  static final String OP_GE = "ge";
  static final String OPERAND_INPUT = "input";
  static final String OPERAND_VALUE = "value";
  static final String OPERAND_LITERAL = "literal";
  static final String FIELD_OP = "op";
  static final String FIELD_LEFT = "left";
  static final String FIELD_RIGHT = "right";
}
