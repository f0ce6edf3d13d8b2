package asynclookup.sql;

import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Conditions the table function judges on each pair of an input row and one of its key's
 * matches, in Arrow, before the join: a comparison ({@code = <> < <= > >=}) of a table's value
 * column with an input column, another value column or a literal, of one type that Arrow
 * compares as Spark does (integers, decimals, dates, timestamps, strings by their bytes,
 * booleans; not floating point, whose NaN Spark orders otherwise). A validity range — {@code
 * e.ts >= u.valid_from AND e.ts < u.valid_to}, {@code BETWEEN} — is two of them: a LEFT, semi or
 * anti join with it then runs as lookups directly, a point-in-time join of a versioned table
 * asking each key once. They never raise; a comparison with a null is not true, as in Spark.
 */
final class PairConditions {
  private PairConditions() {}

  /** Whether {@code c} (over the input's attributes and the relation's) is one of them. */
  static boolean takes(Expression c, LookupTable table, AttributeSet inputSet) {
    Expression e = c instanceof Not ? ((Not) c).child() : c;
    if (c instanceof Not && !(e instanceof EqualTo)) {
      return false;
    }
    if (!(e instanceof EqualTo
        || e instanceof LessThan
        || e instanceof LessThanOrEqual
        || e instanceof GreaterThan
        || e instanceof GreaterThanOrEqual)) {
      return false;
    }
    BinaryComparison comparison = (BinaryComparison) e;
    Expression left = comparison.left();
    Expression right = comparison.right();
    boolean readsValue = value(left, table) || value(right, table);
    return readsValue
        && left.dataType().sameType(right.dataType())
        && comparable(left.dataType())
        && operand(left, table, inputSet)
        && operand(right, table, inputSet);
  }

  private static boolean value(Expression e, LookupTable table) {
    return e instanceof AttributeReference && table.isValue((Attribute) e);
  }

  private static boolean operand(Expression e, LookupTable table, AttributeSet inputSet) {
    if (e instanceof AttributeReference) {
      return table.isValue((Attribute) e) || inputSet.contains((Attribute) e);
    }
    if (e instanceof Literal) {
      Literal literal = (Literal) e;
      DataType type = literal.dataType();
      return literal.value() != null
          && (integral(type)
              || type instanceof StringType
              || type instanceof BooleanType
              || type instanceof DecimalType);
    }
    return false;
  }

  private static boolean comparable(DataType type) {
    return integral(type)
        || Casts.binary(type)
        || type instanceof BooleanType
        || type instanceof DecimalType
        || type instanceof DateType
        || type instanceof TimestampType
        || type instanceof TimestampNTZType;
  }

  private static boolean integral(DataType type) {
    return type instanceof ByteType
        || type instanceof ShortType
        || type instanceof IntegerType
        || type instanceof LongType;
  }

  /**
   * {@code conditions} as the table function takes them (JSON): an input attribute by the
   * name it has in {@code TABLE(...)} ({@code inputs}: its id to that name), a value by its
   * column name, a literal by its value.
   */
  static String json(List<Expression> conditions, Map<ExprId, String> inputs) {
    StringBuilder out = new StringBuilder("[");
    for (Expression c : conditions) {
      boolean negated = c instanceof Not;
      BinaryComparison e = (BinaryComparison) (negated ? ((Not) c).child() : c);
      out.append(out.length() > 1 ? ",{" : "{");
      out.append(TableFunctions.jsonString(Contract.FIELD_OP)).append(':');
      out.append(TableFunctions.jsonString(op(e, negated))).append(',');
      out.append(TableFunctions.jsonString(Contract.FIELD_LEFT)).append(':');
      out.append(operand(e.left(), inputs)).append(',');
      out.append(TableFunctions.jsonString(Contract.FIELD_RIGHT)).append(':');
      out.append(operand(e.right(), inputs)).append('}');
    }
    return out.append(']').toString();
  }

  private static String op(BinaryComparison e, boolean negated) {
    if (e instanceof EqualTo) {
      return negated ? Contract.OP_NE : Contract.OP_EQ;
    }
    if (e instanceof LessThan) {
      return Contract.OP_LT;
    }
    if (e instanceof LessThanOrEqual) {
      return Contract.OP_LE;
    }
    return e instanceof GreaterThan ? Contract.OP_GT : Contract.OP_GE;
  }

  private static String operand(Expression e, Map<ExprId, String> inputs) {
    if (e instanceof Literal) {
      Object value = ((Literal) e).value();
      if (value instanceof Decimal) {
        return entry(Contract.OPERAND_LITERAL, TableFunctions.jsonString(((Decimal) value).toJavaBigDecimal().toPlainString()));
      }
      if (value instanceof Boolean || value instanceof Number) {
        return entry(Contract.OPERAND_LITERAL, value.toString());
      }
      return entry(Contract.OPERAND_LITERAL, TableFunctions.jsonString(value.toString()));
    }
    Attribute a = (Attribute) e;
    String input = inputs.get(a.exprId());
    return input != null
        ? entry(Contract.OPERAND_INPUT, TableFunctions.jsonString(input))
        : entry(Contract.OPERAND_VALUE, TableFunctions.jsonString(a.name()));
  }

  /** {@code {"<kind>": <json>}}. */
  private static String entry(String kind, String json) {
    return "{" + TableFunctions.jsonString(kind) + ":" + json + "}";
  }
}
