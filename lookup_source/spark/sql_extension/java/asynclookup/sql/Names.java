package asynclookup.sql;

/** The column names the rewrite gives the table function's input and output. */
final class Names {
  private Names() {}

  /** No lookup table column may start with it (the rewrite leaves such a table alone). */
  static final String PREFIX = Contract.COLUMN_PREFIX;

  static String input(int i) {
    return PREFIX + "c" + i;
  }

  static String key(int k) {
    return PREFIX + "k" + k;
  }

  static final String MATCHED = PREFIX + "matched";
}
