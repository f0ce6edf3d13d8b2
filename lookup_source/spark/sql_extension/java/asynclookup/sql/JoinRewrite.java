package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.OuterReference;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.ResolvedHint;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

/**
 * One join rewritten into a call of its lookup table's function:
 *
 * <pre>
 *   Project [the join's attributes, under their own ids]          (the rest of the query binds)
 *   +- Filter [conditions on the table's values]                  (inner joins)
 *      +- Project [the call's columns, under ids of our own]
 *         +- f(TABLE(Project [input columns, key expressions]     (f: the table's function)
 *                    +- Filter [conditions on the input]          (inner joins)
 *                       +- the join's input, with new ids),
 *              'keys', 'inner' | 'left', 'matched flag', 'sql-join')
 * </pre>
 *
 * Throws {@link NotRewritten} whenever the join cannot be rewritten exactly.
 */
final class JoinRewrite {
  /** What the table function is told: a SQL JOIN's lookup (strict; may refuse, see README). */
  static final String MODE = "sql-join";

  final LogicalPlan plan;
  final String function;
  final String reason;

  private JoinRewrite(LogicalPlan plan, String function, String reason) {
    this.plan = plan;
    this.function = function;
    this.reason = reason;
  }

  static JoinRewrite of(SparkSession session, Join join, LookupSide side, boolean onRight) {
    boolean inner = join.joinType() == Inner$.MODULE$;
    boolean leftOuter = join.joinType() == LeftOuter$.MODULE$;
    if (!inner && !leftOuter) {
      throw new NotRewritten("a " + join.joinType().sql() + " JOIN keeps rows lookups cannot give");
    }
    if (leftOuter && !onRight) {
      throw new NotRewritten("a LEFT JOIN with the lookup table on its left keeps every table row");
    }
    if (join.condition().isEmpty()) {
      throw new NotRewritten("the JOIN has no ON condition");
    }
    if (!join.hint().equals(JoinHint.NONE())) {
      throw new NotRewritten("a join hint asks for Spark's join: " + join.hint());
    }
    if (hasOuterReference(join)) {
      throw new NotRewritten("the JOIN is inside a correlated subquery");
    }
    LogicalPlan input = onRight ? join.left() : join.right();
    if (input instanceof ResolvedHint) {
      throw new NotRewritten("a join hint asks for Spark's join: " + ((ResolvedHint) input).hints());
    }
    LookupTable table = side.table;
    Strategy strategy = Strategy.of(table, input);
    if (!strategy.lookups) {
      throw new NotRewritten(strategy.reason);
    }
    Conditions conditions =
        Conditions.of(join.condition().get(), side, input.outputSet(), leftOuter);
    if (leftOuter && !conditions.onValues.isEmpty()) {
      throw new NotRewritten(
          "a LEFT JOIN whose condition reads the lookup table's values ("
              + Expressions.and(conditions.onValues).sql()
              + ") keeps rows by all of a key's matches");
    }
    String function = TableFunctions.functionFor(session, table);
    LogicalPlan call =
        LookupCall.of(
            session.sessionState().sqlParser(),
            function,
            tableArgument(input, table, conditions, inner),
            keyColumns(table),
            inner ? "inner" : "left",
            Names.MATCHED,
            MODE);
    return new JoinRewrite(output(join, input, side, conditions, call), function, strategy.reason);
  }

  /** TABLE(...): the input (a copy with new ids) and its keys, without the rows an inner join's
   * conditions on the input drop; in a LEFT JOIN, a row failing them gets no key. */
  private static LogicalPlan tableArgument(
      LogicalPlan input, LookupTable table, Conditions conditions, boolean inner) {
    FreshIds fresh = FreshIds.of(input);
    Map<ExprId, Expression> toCopy = new HashMap<>(fresh.renamed);
    LogicalPlan rows = fresh.plan;
    Expression onInput = Expressions.and(conditions.onInput);
    if (inner && onInput != null) {
      rows = new Filter(Expressions.substitute(onInput, toCopy), rows);
    }
    List<Attribute> columns = Scala.list(input.output());
    List<NamedExpression> named = new ArrayList<>();
    for (int i = 0; i < columns.size(); i++) {
      Attribute copy = fresh.renamed.get(columns.get(i).exprId());
      named.add(Expressions.alias(copy, Names.input(i), NamedExpression.newExprId()));
    }
    for (int k = 0; k < table.keys.size(); k++) {
      Expression key = Expressions.substitute(conditions.keys[k], toCopy);
      if (!inner && onInput != null && k == 0) { // no key: the row keeps nulls
        key =
            new If(
                Expressions.substitute(onInput, toCopy),
                key,
                Literal.create(null, table.keys.get(k).dataType()));
      }
      named.add(Expressions.alias(key, Names.key(k), NamedExpression.newExprId()));
    }
    return new Project(Scala.seq(named), rows);
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
  private static LogicalPlan output(
      Join join,
      LogicalPlan input,
      LookupSide side,
      Conditions conditions,
      LogicalPlan call) {
    LookupTable table = side.table;
    Map<ExprId, Expression> toCall = new HashMap<>();
    List<NamedExpression> named = new ArrayList<>();
    List<Attribute> columns = Scala.list(input.output());
    for (int i = 0; i < columns.size(); i++) {
      Attribute a = columns.get(i);
      toCall.put(a.exprId(), column(named, Names.input(i), a.dataType(), a.nullable()));
    }
    for (int k = 0; k < table.keys.size(); k++) {
      Attribute key = table.keys.get(k);
      toCall.put(key.exprId(), column(named, Names.key(k), key.dataType(), true));
    }
    for (Attribute value : table.values) {
      toCall.put(value.exprId(), column(named, value.name(), value.dataType(), true));
    }
    Expression matched = column(named, Names.MATCHED, DataTypes.BooleanType, true);
    LogicalPlan plan = new Project(Scala.seq(named), call);
    Expression onValues = Expressions.and(conditions.onValues);
    if (onValues != null) {
      plan = new Filter(Expressions.substitute(onValues, toCall), plan);
    }
    List<NamedExpression> outputs = new ArrayList<>();
    AttributeSet inputSet = input.outputSet();
    for (Attribute a : Scala.list(join.output())) {
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
  private static AttributeReference column(
      List<NamedExpression> named, String name, DataType type, boolean nullable) {
    ExprId id = NamedExpression.newExprId();
    named.add(Expressions.alias(Expressions.column(name), name, id));
    return Expressions.reference(name, type, nullable, id);
  }

  private static boolean hasOuterReference(LogicalPlan plan) {
    for (Expression e : Scala.list(plan.expressions())) {
      if (e.find(Scala.fn(n -> (Object) (n instanceof OuterReference))).isDefined()) {
        return true;
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      if (hasOuterReference(child)) {
        return true;
      }
    }
    return false;
  }
}
