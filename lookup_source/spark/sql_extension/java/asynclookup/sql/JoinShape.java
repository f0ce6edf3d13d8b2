package asynclookup.sql;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.InSubquery;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.plans.Cross$;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.JoinType;
import org.apache.spark.sql.catalyst.plans.LeftAnti$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.LeftSemi$;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationDef;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.ResolvedHint;

/**
 * A join against a lookup table as the rewrite sees it, whatever SQL wrote it: {@code JOIN ...
 * ON}, a comma join or {@code CROSS JOIN} whose {@code WHERE} equates the keys, {@code LEFT SEMI}
 * / {@code LEFT ANTI} joins, and {@code EXISTS} / {@code NOT EXISTS} / {@code IN} subqueries of
 * a {@code WHERE}. Its parts: the input (whose rows are looked up), the lookup side, the kind of
 * join, its condition, and the attributes the rewrite must output under their ids.
 */
final class JoinShape {
  enum Kind {
    INNER(Contract.HOW_INNER),
    LEFT(Contract.HOW_LEFT),
    SEMI(Contract.HOW_SEMI),
    ANTI(Contract.HOW_ANTI),
    /** {@code NOT IN}: an anti join whose rows follow the table when it runs (none for a null
     * key, all for no row, else those whose value is not null: the table function asks). */
    NOT_IN(Contract.HOW_NOT_IN);

    /** What the table function is told ({@code how}). */
    final String how;

    Kind(String how) {
      this.how = how;
    }

    /** Whether the output holds the table's columns (inner and left joins). */
    boolean withValues() {
      return this == INNER || this == LEFT;
    }
  }

  final LogicalPlan input;
  final LookupSide side;
  /** The lookup side's own plan (a subquery's, its correlated filters included). */
  final LogicalPlan sidePlan;
  final Kind kind;
  final Expression condition;
  final List<Attribute> output;
  /** Whether the lookup side is the join's right side (a LEFT JOIN's must be). */
  final boolean onRight;
  /** What wrote it, for messages: "INNER JOIN", "WHERE EXISTS"... */
  final String written;
  /** {@code NOT IN}'s value, as the input gives it (a row where it is null is not kept). */
  Expression notInValue;

  private JoinShape(
      LogicalPlan input,
      LookupSide side,
      LogicalPlan sidePlan,
      Kind kind,
      Expression condition,
      List<Attribute> output,
      boolean onRight,
      String written) {
    this.input = input;
    this.side = side;
    this.sidePlan = sidePlan;
    this.kind = kind;
    this.condition = condition;
    this.output = output;
    this.onRight = onRight;
    this.written = written;
  }

  /**
   * A join with a lookup side; {@code where}: the conditions of a {@code WHERE} right above it
   * (a comma or cross join's), taken into its condition (null: none).
   */
  static JoinShape ofJoin(Join join, Expression where, Map<Long, CTERelationDef> ctes) {
    if (!join.hint().equals(JoinHint.NONE())) {
      throw new NotRewritten("a join hint asks for Spark's join: " + join.hint());
    }
    boolean onRight = LookupSide.looksLikeOne(join.right(), ctes);
    LogicalPlan input = onRight ? join.left() : join.right();
    if (input instanceof ResolvedHint) {
      throw new NotRewritten("a join hint asks for Spark's join: " + ((ResolvedHint) input).hints());
    }
    JoinType type = join.joinType();
    Kind kind;
    if (type == Inner$.MODULE$ || type == Cross$.MODULE$) {
      kind = Kind.INNER;
    } else if (type == LeftOuter$.MODULE$) {
      kind = Kind.LEFT;
    } else if (type == LeftSemi$.MODULE$) {
      kind = Kind.SEMI;
    } else if (type == LeftAnti$.MODULE$) {
      kind = Kind.ANTI;
    } else {
      throw new NotRewritten("a " + type.sql() + " JOIN keeps rows lookups cannot give");
    }
    if (kind != Kind.INNER && !onRight) {
      throw new NotRewritten(
          "a " + type.sql() + " JOIN with the lookup table on its left keeps every table row");
    }
    Expression condition = join.condition().isDefined() ? join.condition().get() : null;
    if (where != null && kind != Kind.INNER) { // a WHERE above an outer join is not its ON
      throw new NotRewritten("a " + type.sql() + " JOIN without ON, filtered by a WHERE");
    }
    if (where != null) {
      condition = condition == null ? where : Expressions.and(List.of(condition, where));
    }
    if (condition == null) {
      throw new NotRewritten("the " + type.sql() + " JOIN has no condition that equates the keys");
    }
    LogicalPlan sidePlan = onRight ? join.right() : join.left();
    LookupSide side = LookupSide.of(sidePlan, ctes);
    if (side.table.readBy(input)) {
      throw new NotRewritten(
          "both sides read the same lookup table (a self-join): Spark's DataFrame API resolves"
              + " a self-join's condition on its own join");
    }
    return new JoinShape(
        input,
        side,
        sidePlan,
        kind,
        condition,
        kind.withValues() ? Scala.list(join.output()) : Scala.list(input.output()),
        onRight,
        type.sql() + " JOIN");
  }

  /** Whether {@code join} is an inner or cross join (whose WHERE may be its condition). */
  static boolean innerOrCross(Join join) {
    return join.joinType() == Inner$.MODULE$ || join.joinType() == Cross$.MODULE$;
  }

  /** Whether {@code predicate} (a conjunct of a WHERE) is a subquery this class takes. */
  static LogicalPlan subqueryPlan(Expression predicate) {
    Expression p = predicate instanceof Not ? ((Not) predicate).child() : predicate;
    if (p instanceof Exists) {
      return ((Exists) p).plan();
    }
    if (p instanceof InSubquery) {
      return ((InSubquery) p).query().plan();
    }
    return null;
  }

  /**
   * {@code WHERE e.k NOT IN (SELECT k FROM t)}: whether a row is kept depends on the whole
   * table — none is if the table holds a null key, every one if it holds no row, and a row with
   * a null value only then. So only a plain list of the table's one key column (no filter, no
   * correlation) is taken; the table function asks the store whether it holds a null key or no
   * row, and refuses the rewrite unless neither (then {@code NOT IN} keeps exactly the rows
   * whose value is not null and not a key).
   */
  private static JoinShape notIn(
      InSubquery in, LogicalPlan input, LookupSide side, LogicalPlan plan) {
    List<Expression> values = Scala.list(in.values());
    LookupTable table = side.table;
    if (values.size() != 1 || side.output.size() != 1 || table.keys.size() != 1) {
      throw new NotRewritten("NOT IN over several columns, or a table of a composite key");
    }
    if (!side.filters.isEmpty()) {
      throw new NotRewritten(
          "NOT IN over a filtered table: whether that part holds a null key or any row is"
              + " known only by reading it");
    }
    Expression listed = side.outputs.get(side.output.get(0).exprId());
    Expression column = listed;
    while (column instanceof org.apache.spark.sql.catalyst.expressions.Cast) { // (widened)
      column = ((org.apache.spark.sql.catalyst.expressions.Cast) column).child();
    }
    if (!(column instanceof Attribute) || table.keyIndex((Attribute) column) != 0) {
      throw new NotRewritten("NOT IN over another column than the table's key");
    }
    JoinShape shape =
        new JoinShape(
            input,
            side,
            plan,
            Kind.NOT_IN,
            new EqualTo(values.get(0), listed),
            Scala.list(input.output()),
            true,
            "WHERE NOT IN");
    shape.notInValue = values.get(0);
    return shape;
  }

  /**
   * {@code WHERE [NOT] EXISTS (SELECT ... FROM t WHERE t.k = e.k ...)} or {@code WHERE e.k IN
   * (SELECT k FROM t ...)} over {@code input}: a semi join, or an anti join. {@code NOT IN} is
   * not one: its answer depends on whether the whole table holds a null key, or any row.
   */
  static JoinShape ofSubquery(
      Expression predicate, LogicalPlan input, Map<Long, CTERelationDef> ctes) {
    boolean negated = predicate instanceof Not;
    Expression p = negated ? ((Not) predicate).child() : predicate;
    LogicalPlan plan = subqueryPlan(p);
    LookupSide side = LookupSide.of(plan, ctes, true);
    if (p instanceof InSubquery && negated) {
      return notIn((InSubquery) p, input, side, plan);
    }
    List<Expression> correlated = new ArrayList<>();
    List<Expression> plain = new ArrayList<>();
    for (Expression f : side.filters) {
      if (Expressions.isCorrelated(f)) {
        correlated.add(Expressions.withoutOuter(f));
      } else {
        plain.add(f);
      }
    }
    if (p instanceof InSubquery) {
      List<Expression> values = Scala.list(((InSubquery) p).values());
      List<Attribute> columns = side.output;
      if (values.size() != columns.size()) {
        throw new NotRewritten("an IN subquery whose columns do not match its values");
      }
      for (int i = 0; i < values.size(); i++) {
        correlated.add(new EqualTo(values.get(i), side.outputs.get(columns.get(i).exprId())));
      }
    }
    if (correlated.isEmpty()) {
      throw new NotRewritten("the subquery does not compare the table's keys with the query's");
    }
    String written = (negated ? "WHERE NOT " : "WHERE ") + (p instanceof Exists ? "EXISTS" : "IN");
    return new JoinShape(
        input,
        side.withFilters(plain),
        plan,
        negated ? Kind.ANTI : Kind.SEMI,
        Expressions.and(correlated),
        Scala.list(input.output()),
        true,
        written);
  }
}
