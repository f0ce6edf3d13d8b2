package asynclookup.sql;

import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;

/** Which types a key may have, and which casts of it keep equality exactly. */
final class Casts {
  private Casts() {}

  /**
   * Whether every value of {@code from} becomes a distinct value of {@code to} that compares as
   * it did and never raises: an integral type into a wider one, an integral or decimal type into
   * a decimal with room for all its digits, a float into a double, a small integral into a
   * double (exact up to 2^53). Strings (whose collations decide equality), dates and timestamps
   * (time zones) are never widened through.
   */
  static boolean oneToOne(DataType from, DataType to) {
    if (from.sameType(to)) {
      return !(from instanceof StringType) || binary(from);
    }
    int fromDigits = integralDigits(from);
    if (fromDigits > 0) {
      if (integralDigits(to) > 0) {
        return integralDigits(to) >= fromDigits;
      }
      if (to instanceof DecimalType) {
        DecimalType d = (DecimalType) to;
        return d.precision() - d.scale() >= fromDigits;
      }
      return to instanceof DoubleType && fromDigits <= 10; // int and smaller: exact in a double
    }
    if (from instanceof DecimalType && to instanceof DecimalType) {
      DecimalType a = (DecimalType) from;
      DecimalType b = (DecimalType) to;
      return b.scale() >= a.scale() && b.precision() - b.scale() >= a.precision() - a.scale();
    }
    return from instanceof FloatType && to instanceof DoubleType;
  }

  private static int integralDigits(DataType type) {
    if (type instanceof ByteType) {
      return 3;
    }
    if (type instanceof ShortType) {
      return 5;
    }
    if (type instanceof IntegerType) {
      return 10;
    }
    if (type instanceof LongType) {
      return 19;
    }
    return 0;
  }

  /** A string type that compares byte by byte (no collation but the default). */
  static boolean binary(DataType type) {
    return type instanceof StringType && ((StringType) type).collationId() == 0;
  }

  /**
   * Why a key of this type cannot be looked up as Spark compares it, or null: floats (Spark
   * equates NaNs and -0.0 with 0.0, a store compares their text or bits), strings under a
   * collation (the store compares bytes).
   */
  static String unfitKey(DataType type) {
    if (type instanceof FloatType || type instanceof DoubleType) {
      return "a " + type.simpleString() + " key compares otherwise in Spark (NaN, -0.0) than in"
          + " a store";
    }
    if (type instanceof StringType && !binary(type)) {
      return "a key under a collation (" + type.simpleString() + ") compares otherwise than the"
          + " store's bytes";
    }
    return null;
  }
}
