package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.JoinType;
import org.apache.spark.sql.catalyst.plans.LeftAnti$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.LeftSemi$;
import org.apache.spark.sql.catalyst.plans.logical.Distinct;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.classic.SparkSession;
import scala.Option;

/**
 * A join whose conditions Spark must evaluate itself — a LEFT JOIN whose condition reads the
 * table's values (a validity range: {@code ON e.uid = u.uid AND e.ts >= u.valid_from AND e.ts <
 * u.valid_to}), a semi or anti join with such conditions, one whose conditions on the input may
 * raise — keeps Spark's join, but against the table's rows for the input's keys only, looked up,
 * instead of a scan of the whole table:
 *
 * <pre>
 *   Join [the join's type and condition, unchanged]
 *   :- the input
 *   +- Project [the lookup side's columns, under their ids]
 *      +- Filter [the lookup side's filters]
 *         +- Project [the table's columns, under ids of our own]
 *            +- f(TABLE(Distinct(Project [key expressions]           (each key asked once)
 *                       +- Filter [conditions on the input that cannot raise]
 *                          +- the input, with new ids)), 'keys', 'inner', ..., 'sql-join')
 * </pre>
 *
 * Spark's join sees every table row whose key equals an input key — the only rows its condition
 * can keep — and evaluates the whole condition on them as it would have: the answer is its own.
 * The input is read twice (its keys, then the join), so it must be deterministic and no stream.
 */
final class KeysFirstPlan {
  private KeysFirstPlan() {}

  static LogicalPlan of(
      SparkSession session, JoinShape shape, Conditions conditions, String function, String facts) {
    if (shape.input.isStreaming()) {
      throw new NotRewritten(
          "a " + shape.written + " whose conditions Spark must evaluate after the lookups needs"
              + " the stream's rows twice (its keys, then the join)");
    }
    String unstable = ReadTwice.why(shape.input);
    if (unstable != null) {
      throw new NotRewritten(
          "the input is read twice (its keys, then the join), and " + unstable);
    }
    LookupTable table = shape.side.table;
    List<String> keyNames = new ArrayList<>();
    for (int k = 0; k < table.keys.size(); k++) {
      keyNames.add(Names.key(k));
    }
    LogicalPlan call =
        LookupCall.of(
            session.sessionState().sqlParser(),
            function,
            keysArgument(shape, conditions),
            keyNames,
            Contract.HOW_INNER,
            Names.MATCHED,
            DirectLookupPlan.MODE,
            "",
            facts);
    // the table's columns under ids of our own (the relation's may be read elsewhere too)
    Map<ExprId, Expression> fresh = new HashMap<>();
    List<NamedExpression> columns = new ArrayList<>();
    List<Attribute> tableColumns = new ArrayList<>();
    for (int k = 0; k < table.keys.size(); k++) {
      Attribute key = table.keys.get(k);
      AttributeReference ref = aliased(columns, Names.key(k), key);
      fresh.put(key.exprId(), ref);
      tableColumns.add(ref);
    }
    for (Attribute value : table.values) {
      AttributeReference ref = aliased(columns, value.name(), value);
      fresh.put(value.exprId(), ref);
      tableColumns.add(ref);
    }
    LogicalPlan rows = new Project(Scala.seq(columns), call);
    Expression filters = Expressions.and(shape.side.filters);
    if (filters != null) {
      rows = new Filter(Expressions.substitute(filters, fresh), rows);
    }
    List<NamedExpression> sideColumns = new ArrayList<>();
    for (Attribute a : shape.side.output) {
      Expression defined = shape.side.outputs.get(a.exprId());
      if (defined == null) {
        throw new NotRewritten("the lookup side's column " + a.name() + " comes from elsewhere");
      }
      sideColumns.add(
          Expressions.alias(
              Expressions.substitute(defined, fresh),
              a.name(),
              a.exprId(),
              a.qualifier(),
              a.metadata()));
    }
    sideColumns.addAll(tableColumns); // what a subquery's condition reads
    LogicalPlan side = new Project(Scala.seq(sideColumns), rows);
    Expression condition = Expressions.substitute(shape.condition, fresh);
    Join join = new Join(shape.input, side, joinType(shape.kind), Option.apply(condition), JoinHint.NONE());
    return new Project(Scala.seq(new ArrayList<NamedExpression>(shape.output)), join);
  }

  /** TABLE(...): the distinct keys of the input rows that may match. */
  private static LogicalPlan keysArgument(JoinShape shape, Conditions conditions) {
    FreshIds copy = FreshIds.of(shape.input);
    Map<ExprId, Expression> toCopy = new HashMap<>(copy.renamed);
    LogicalPlan rows = copy.plan;
    // a row failing them matches nothing; a semi join's are Spark's filter on its input, run
    // first whatever they raise; the others', only those that cannot raise
    List<Expression> safe = new ArrayList<>();
    for (Expression c : conditions.onInput) {
      if (shape.kind == JoinShape.Kind.SEMI || RaiseFree.neverRaises(c)) {
        safe.add(Expressions.substitute(c, toCopy));
      }
    }
    if (!safe.isEmpty()) {
      rows = new Filter(Expressions.and(safe), rows);
    }
    List<NamedExpression> keys = new ArrayList<>();
    for (int k = 0; k < conditions.keys.length; k++) {
      Expression key = Expressions.substitute(conditions.keys[k], toCopy);
      keys.add(Expressions.alias(key, Names.key(k), NamedExpression.newExprId()));
    }
    return new Distinct(new Project(Scala.seq(keys), rows));
  }

  private static AttributeReference aliased(
      List<NamedExpression> columns, String callColumn, Attribute column) {
    ExprId id = NamedExpression.newExprId();
    columns.add(Expressions.alias(Expressions.column(callColumn), column.name(), id));
    return Expressions.reference(column.name(), column.dataType(), true, id);
  }

  private static JoinType joinType(JoinShape.Kind kind) {
    switch (kind) {
      case LEFT:
        return LeftOuter$.MODULE$;
      case SEMI:
        return LeftSemi$.MODULE$;
      case ANTI:
        return LeftAnti$.MODULE$;
      case NOT_IN:
        throw new NotRewritten("NOT IN runs as lookups directly, or stays Spark's");
      default:
        throw new NotRewritten("an inner join runs as lookups directly");
    }
  }



}
