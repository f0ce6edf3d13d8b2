package asynclookup.sql;

/** Why a join is left to Spark: thrown while the rewrite is being worked out, never past it. */
final class NotRewritten extends RuntimeException {
  private static final long serialVersionUID = 1L;

  NotRewritten(String reason) {
    super(reason, null, false, false);
  }
}
