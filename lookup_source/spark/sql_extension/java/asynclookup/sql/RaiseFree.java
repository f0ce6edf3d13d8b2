package asynclookup.sql;

import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.BinaryArithmetic;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.StringType;

/**
 * Which expressions can never raise an error, whatever row they are evaluated on, as the session
 * built them (each arithmetic and cast node carries its own ANSI mode). The rewrite evaluates
 * some conditions on other rows than Spark's join would — a LEFT JOIN's conditions on the input
 * on every input row, where Spark evaluates them on the rows whose key matched; a filter of the
 * lookup side on the table's matched rows only, where Spark evaluates it on every row it scans —
 * so it moves only those that cannot raise: then no query fails or succeeds with the rewrite
 * that would not without it.
 *
 * <p>Known to never raise: references and literals; comparisons, boolean logic, null tests,
 * {@code IN} lists, {@code CASE}/{@code IF}/{@code COALESCE}; string functions that only read
 * their input; {@code LIKE} and {@code RLIKE} with a literal pattern that compiles; casts that
 * cannot fail (TRY casts, casts outside ANSI mode, widening casts, casts to string, casts of a
 * constant that succeed); arithmetic outside ANSI mode, on floating point, and {@code %} or
 * division by a literal that is not zero (nor -1 for an integral division). Anything else may
 * raise.
 */
final class RaiseFree {
  private RaiseFree() {}

  private static final Set<String> ALWAYS =
      Set.of(
          "AttributeReference",
          "BoundReference",
          "OuterReference",
          "Literal",
          "Alias",
          "And",
          "Or",
          "Not",
          "EqualTo",
          "EqualNullSafe",
          "LessThan",
          "LessThanOrEqual",
          "GreaterThan",
          "GreaterThanOrEqual",
          "IsNull",
          "IsNotNull",
          "IsNaN",
          "NaNvl",
          "In",
          "InSet",
          "If",
          "CaseWhen",
          "Coalesce",
          "NullIf",
          "Nvl",
          "Nvl2",
          "Greatest",
          "Least",
          "AtLeastNNonNulls",
          "KnownNotNull",
          "KnownNullable",
          "KnownFloatingPointNormalized",
          "NormalizeNaNAndZero",
          "StartsWith",
          "EndsWith",
          "Contains",
          "Upper",
          "Lower",
          "InitCap",
          "Length",
          "OctetLength",
          "BitLength",
          "StringTrim",
          "StringTrimLeft",
          "StringTrimRight",
          "StringTrimBoth",
          "Concat",
          "ConcatWs",
          "Substring",
          "Left",
          "Right",
          "StringInstr",
          "StringLocate",
          "Reverse",
          "Ascii",
          "Md5",
          "Sha1",
          "Crc32",
          "Hex",
          "Murmur3Hash",
          "XxHash64",
          "GetStructField",
          "CreateNamedStruct",
          "CreateArray",
          "ArrayContains",
          "Year",
          "Quarter",
          "Month",
          "DayOfMonth",
          "DayOfWeek",
          "DayOfYear",
          "WeekDay",
          "Hour",
          "Minute",
          "Second");

  /** Whether evaluating {@code e} can never raise, on any row. */
  static boolean neverRaises(Expression e) {
    return e.find(Scala.fn(node -> (Object) !free(node))).isEmpty();
  }

  private static boolean free(Expression node) {
    String name = node.getClass().getSimpleName();
    if (ALWAYS.contains(name)) {
      return true;
    }
    if (node instanceof Cast) {
      return castFree((Cast) node);
    }
    switch (name) {
      case "Like":
      case "ILike":
        return likeFree(node);
      case "Add":
      case "Subtract":
      case "Multiply":
      case "UnaryMinus":
      case "Abs":
        return numeric(node) && (!ansi(node) || floating(node));
      case "Divide":
        return numeric(node) && (!ansi(node) || (floating(node) && divisorNot(node, 0)));
      case "Remainder":
      case "Pmod":
        return numeric(node) && (!ansi(node) || divisorNot(node, 0));
      case "IntegralDivide":
        return numeric(node) && (!ansi(node) || (divisorNot(node, 0) && divisorNot(node, -1)));
      default:
        return false;
    }
  }

  /** Whether a cast cannot fail: see the class doc. */
  static boolean castFree(Cast cast) {
    String mode = cast.evalMode().toString();
    if ("TRY".equals(mode)) {
      return true;
    }
    if ("LEGACY".equals(mode) && atomic(cast.child().dataType()) && atomic(cast.dataType())) {
      return true; // (a cast to or from an interval or a nested type may still raise)
    }
    if (cast.dataType() instanceof StringType
        || Casts.oneToOne(cast.child().dataType(), cast.dataType())) {
      return true;
    }
    try {
      if (Cast.canUpCast(cast.child().dataType(), cast.dataType())) {
        return true;
      }
    } catch (LinkageError ignored) { // another Spark: judge by the rest
    }
    if (cast.child().foldable()) {
      try {
        cast.eval(null); // a constant: it either casts now, or never does
        return true;
      } catch (RuntimeException raised) {
        return false;
      }
    }
    return false;
  }

  private static boolean likeFree(Expression like) {
    Expression pattern = like.children().apply(1);
    if (!(pattern instanceof Literal) || ((Literal) pattern).value() == null) {
      return false;
    }
    try {
      char escape = (char) like.getClass().getMethod("escapeChar").invoke(like);
      org.apache.spark.sql.catalyst.util.StringUtils.escapeLikeRegex(
          ((Literal) pattern).value().toString(), escape);
      return true;
    } catch (ReflectiveOperationException | RuntimeException | LinkageError invalid) {
      return false;
    }
  }

  /** Whether an arithmetic node runs in ANSI mode (it raises on overflow, division by zero). */
  private static boolean ansi(Expression node) {
    Object mode = call(node, "evalMode"); // Spark 4.0's arithmetic
    if (mode == null) { // 4.1+: its evaluation context says
      Object context = call(node, "evalContext");
      mode = context == null ? null : call(context, "evalMode");
    }
    if (mode != null) {
      return "ANSI".equals(String.valueOf(mode));
    }
    return !Boolean.FALSE.equals(call(node, "failOnError")); // cannot tell: it may raise
  }

  /** {@code target.<method>()}, or null where it has no such method. */
  private static Object call(Object target, String method) {
    try {
      return target.getClass().getMethod(method).invoke(target);
    } catch (ReflectiveOperationException | RuntimeException | LinkageError none) {
      return null;
    }
  }

  /** Whether {@code node}'s result is a number (not an interval, a date or a timestamp). */
  private static boolean numeric(Expression node) {
    return node.dataType() instanceof org.apache.spark.sql.types.NumericType;
  }

  /** A number, a string, a boolean, a date or a timestamp: what a legacy cast never fails on. */
  private static boolean atomic(org.apache.spark.sql.types.DataType type) {
    return type instanceof org.apache.spark.sql.types.NumericType
        || type instanceof StringType
        || type instanceof org.apache.spark.sql.types.BooleanType
        || type instanceof org.apache.spark.sql.types.DateType
        || type instanceof org.apache.spark.sql.types.TimestampType
        || type instanceof org.apache.spark.sql.types.TimestampNTZType;
  }

  private static boolean floating(Expression node) {
    return node.dataType() instanceof DoubleType || node.dataType() instanceof FloatType;
  }

  /** Whether the divisor of {@code node} is a literal other than {@code value}. */
  private static boolean divisorNot(Expression node, int value) {
    if (!(node instanceof BinaryArithmetic)) {
      return false;
    }
    Expression divisor = ((BinaryArithmetic) node).right();
    if (!(divisor instanceof Literal) || ((Literal) divisor).value() == null) {
      return false;
    }
    try {
      return Double.parseDouble(((Literal) divisor).value().toString()) != value;
    } catch (NumberFormatException notANumber) {
      return false;
    }
  }
}
