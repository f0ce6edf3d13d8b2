package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

/**
 * A join rewritten into a call of its lookup table's function, which takes the join's place —
 * for every join whose conditions it can evaluate exactly where Spark would (see {@link
 * LookupJoinRule}):
 *
 * <pre>
 *   Project [the join's attributes, under their own ids]          (the rest of the query binds)
 *   +- Filter [other conditions on the table's values]            (inner joins)
 *      +- Project [the call's columns, under ids of our own]
 *         +- f(TABLE(Project [input columns, key expressions]     (f: the table's function)
 *                    +- Filter [conditions on the input]          (inner and semi joins)
 *                       +- the join's input, with new ids),
 *              'keys', 'inner' | 'left' | 'semi' | 'anti', 'matched flag', 'sql-join',
 *              'conditions on each pair of a row and a match')          (PairConditions)
 * </pre>
 *
 * In a LEFT or anti join, Spark evaluates the conditions on the input only on the rows whose key
 * matched; here a row failing them gets no key (so no match), which gives the same rows when
 * the conditions cannot raise (the rule checks). Its key is still evaluated first, as Spark
 * evaluates every row's key.
 */
final class DirectLookupPlan {
  /** What the table function is told: a SQL JOIN's lookup (strict; may refuse, see README). */
  static final String MODE = Contract.MODE_SQL_JOIN;

  private DirectLookupPlan() {}

  static LogicalPlan of(
      SparkSession session, JoinShape shape, Conditions conditions, String function, String facts) {
    LookupTable table = shape.side.table;
    boolean withValues = shape.kind.withValues();
    LogicalPlan call =
        LookupCall.of(
            session.sessionState().sqlParser(),
            function,
            tableArgument(shape, conditions),
            keyColumns(table),
            shape.kind.how,
            withValues ? Names.MATCHED : "",
            MODE,
            conditions.onPairs.isEmpty() ? "" : PairConditions.json(conditions.onPairs, inputs(shape)),
            facts);
    return output(shape, conditions, call);
  }

  /** The input's attributes by id, as {@code TABLE(...)} names them. */
  private static Map<ExprId, String> inputs(JoinShape shape) {
    Map<ExprId, String> names = new HashMap<>();
    List<Attribute> columns = Scala.list(shape.input.output());
    for (int i = 0; i < columns.size(); i++) {
      names.put(columns.get(i).exprId(), Names.input(i));
    }
    return names;
  }

  /** TABLE(...): the input (a copy with new ids) and its keys, without the rows an inner or
   * semi join's conditions on the input drop; in a LEFT or anti join, a row failing them gets
   * no key. */
  private static LogicalPlan tableArgument(JoinShape shape, Conditions conditions) {
    LookupTable table = shape.side.table;
    FreshIds fresh = FreshIds.of(shape.input);
    Map<ExprId, Expression> toCopy = new HashMap<>(fresh.renamed);
    LogicalPlan rows = fresh.plan;
    Expression onInput = Expressions.and(conditions.onInput);
    boolean filters = shape.kind == JoinShape.Kind.INNER || shape.kind == JoinShape.Kind.SEMI;
    if (filters) { // a null key never matches: dropped first, as Spark infers and pushes down
      List<Expression> notNull = new ArrayList<>(); // (before what the input computes above)
      for (int k = 0; k < table.keys.size(); k++) {
        notNull.add(new IsNotNull(Expressions.substitute(conditions.keys[k], toCopy)));
      }
      rows = new Filter(Expressions.and(notNull), rows);
    }
    if (filters && onInput != null) {
      rows = new Filter(Expressions.substitute(onInput, toCopy), rows);
    }
    List<Attribute> columns = Scala.list(shape.input.output());
    List<NamedExpression> named = new ArrayList<>();
    for (int i = 0; i < columns.size(); i++) {
      Attribute copy = fresh.renamed.get(columns.get(i).exprId());
      named.add(Expressions.alias(copy, Names.input(i), NamedExpression.newExprId()));
    }
    for (int k = 0; k < table.keys.size(); k++) {
      Expression key = Expressions.substitute(conditions.keys[k], toCopy);
      if (!filters && onInput != null && k == 0) { // no key: no match, the row kept as Spark would
        key = withoutKeyUnless(key, Expressions.substitute(onInput, toCopy), table, k);
      }
      named.add(Expressions.alias(key, Names.key(k), NamedExpression.newExprId()));
    }
    if (shape.kind == JoinShape.Kind.NOT_IN) { // what it keeps depends on the table when it runs
      Expression isNull = new IsNull(Expressions.substitute(shape.notInValue, toCopy));
      named.add(
          Expressions.alias(isNull, Contract.NOT_IN_NULL_COLUMN, NamedExpression.newExprId()));
    }
    return new Project(Scala.seq(named), rows);
  }

  /** {@code key} where {@code condition} holds, else null; the key evaluated first whenever it
   * may raise (Spark evaluates every row's key, whatever the condition). */
  private static Expression withoutKeyUnless(
      Expression key, Expression condition, LookupTable table, int k) {
    Literal none = Literal.create(null, table.keys.get(k).dataType());
    if (RaiseFree.neverRaises(key)) {
      return new If(condition, key, none);
    }
    Expression fails = new Not(new Coalesce(Scala.seq(condition, Literal.create(false, DataTypes.BooleanType))));
    return new If(new Or(new IsNull(key), fails), none, key);
  }

  private static List<String> keyColumns(LookupTable table) {
    List<String> names = new ArrayList<>();
    for (int k = 0; k < table.keys.size(); k++) {
      names.add(Names.key(k));
    }
    return names;
  }

  /** The call's columns under ids of our own; the conditions on values; then the join's
   * attributes under theirs (a table column of a row without a match is null). */
  private static LogicalPlan output(JoinShape shape, Conditions conditions, LogicalPlan call) {
    LookupSide side = shape.side;
    LookupTable table = side.table;
    Map<ExprId, Expression> toCall = new HashMap<>();
    List<NamedExpression> named = new ArrayList<>();
    List<Attribute> columns = Scala.list(shape.input.output());
    for (int i = 0; i < columns.size(); i++) {
      Attribute a = columns.get(i);
      toCall.put(a.exprId(), column(named, Names.input(i), a.dataType(), a.nullable()));
    }
    Expression matched = null;
    if (shape.kind.withValues()) {
      for (int k = 0; k < table.keys.size(); k++) {
        Attribute key = table.keys.get(k);
        toCall.put(key.exprId(), column(named, Names.key(k), key.dataType(), true));
      }
      for (Attribute value : table.values) {
        toCall.put(value.exprId(), column(named, value.name(), value.dataType(), true));
      }
      matched = column(named, Names.MATCHED, DataTypes.BooleanType, true);
    }
    LogicalPlan plan = new Project(Scala.seq(named), call);
    Expression onValues = Expressions.and(conditions.onValues);
    if (onValues != null) {
      plan = new Filter(Expressions.substitute(onValues, toCall), plan);
    }
    List<NamedExpression> outputs = new ArrayList<>();
    AttributeSet inputSet = shape.input.outputSet();
    for (Attribute a : shape.output) {
      Expression value;
      if (inputSet.contains(a)) {
        value = toCall.get(a.exprId());
      } else {
        Expression defined = side.outputs.get(a.exprId());
        if (defined == null) {
          throw new NotRewritten("the join's column " + a.name() + " comes from neither side");
        }
        value = Expressions.substitute(defined, toCall);
        boolean plainValue = defined instanceof Attribute && table.isValue((Attribute) defined);
        if (!plainValue) { // a row without a match (a failed lookup kept): null, as in Spark
          value = new If(matched, value, Literal.create(null, a.dataType()));
        }
      }
      if (value == null || !value.dataType().sameType(a.dataType())) {
        throw new NotRewritten("the join's column " + a.name() + " would change its type");
      }
      outputs.add(Expressions.alias(value, a.name(), a.exprId(), a.qualifier(), a.metadata()));
    }
    return new Project(Scala.seq(outputs), plan);
  }

  /** An alias of the call's column {@code name} under a new id; a reference to it. */
  static AttributeReference column(
      List<NamedExpression> named, String name, DataType type, boolean nullable) {
    ExprId id = NamedExpression.newExprId();
    named.add(Expressions.alias(Expressions.column(name), name, id));
    return Expressions.reference(name, type, nullable, id);
  }
}
