package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationDef;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationRef;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.ResolvedHint;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

/**
 * One side of a join that is a lookup table, perhaps seen through aliases, views, common table
 * expressions ({@code WITH d AS (...)}), projections and filters ({@code JOIN (SELECT user_id,
 * upper(name) AS n FROM users WHERE tier = 1) u}): each of the side's output attributes as an
 * expression over the table's columns, and the side's filters over the table's columns.
 *
 * <p>Spark evaluates the side's projections and filters on every row it scans; the rewrite, on
 * the rows the lookups find. So each must be deterministic, call no subquery nor user function,
 * and never raise ({@link RaiseFree}); else the join is left to Spark. A subquery's side may hold
 * conditions on the outer query (correlated, {@code WHERE u.uid = e.uid}): they are kept in
 * {@link #filters} with their outer references, for the caller to take out.
 */
final class LookupSide {
  final LookupTable table;
  /** The side's output attribute (by id) as an expression over the relation's attributes. */
  final Map<ExprId, Expression> outputs;
  /** The side's output attributes, in order. */
  final List<Attribute> output;
  /** Conditions over the relation's attributes that the side's rows satisfy. */
  final List<Expression> filters;
  /** The view the side reads, when it reads one (for messages). */
  final String view;

  private LookupSide(
      LookupTable table,
      Map<ExprId, Expression> outputs,
      List<Attribute> output,
      List<Expression> filters,
      String view) {
    this.table = table;
    this.outputs = outputs;
    this.output = output;
    this.filters = filters;
    this.view = view;
  }

  /** The same side with other filters (a subquery's correlated ones taken out). */
  LookupSide withFilters(List<Expression> kept) {
    return new LookupSide(table, outputs, output, kept, view);
  }

  /** Whether {@code side} reads an asynclookup relation through nodes the rewrite follows. */
  static boolean looksLikeOne(LogicalPlan side, Map<Long, CTERelationDef> ctes) {
    LogicalPlan p = side;
    while (true) {
      if (p instanceof CTERelationRef) {
        CTERelationDef def = ctes.get(((CTERelationRef) p).cteId());
        if (def == null) {
          return false;
        }
        p = def.child();
      } else if (p instanceof SubqueryAlias
          || p instanceof View
          || p instanceof Project
          || p instanceof Filter
          || p instanceof ResolvedHint) {
        p = p.children().head();
      } else {
        return LookupTable.isLookupRelation(p);
      }
    }
  }

  /** The lookup side {@code side} is; throws {@link NotRewritten} when it is not one. */
  static LookupSide of(LogicalPlan side, Map<Long, CTERelationDef> ctes) {
    return of(side, ctes, false);
  }

  /**
   * The same; with {@code correlated}, the side's filters may read the outer query (a
   * subquery's {@code WHERE u.uid = e.uid}): they are kept, outer references and all.
   */
  static LookupSide of(LogicalPlan side, Map<Long, CTERelationDef> ctes, boolean correlated) {
    List<LogicalPlan> path = new ArrayList<>(); // Projects, Filters and CTE references
    String view = null;
    LogicalPlan p = side;
    while (true) {
      if (p instanceof ResolvedHint) {
        throw new NotRewritten("a join hint asks for Spark's join: " + ((ResolvedHint) p).hints());
      }
      if (p instanceof View && view == null) {
        view = ((View) p).desc().identifier().unquotedString();
      }
      if (p instanceof CTERelationRef) {
        CTERelationDef def = ctes.get(((CTERelationRef) p).cteId());
        if (def == null) {
          throw new NotRewritten("a common table expression the rewrite cannot find");
        }
        path.add(p);
        p = def.child();
      } else if (p instanceof SubqueryAlias || p instanceof View) {
        p = p.children().head();
      } else if (p instanceof Project || p instanceof Filter) {
        path.add(p);
        p = p.children().head();
      } else {
        break;
      }
    }
    if (!LookupTable.isLookupRelation(p)) {
      throw new NotRewritten("not an asynclookup table");
    }
    // The table's columns under ids of their own, which nothing else in the query has: a
    // common table expression's first reference shares its definition's ids, and the input
    // may carry them too (the same CTE joined twice: its first join, rewritten, is the input)
    DataSourceV2Relation scanned = (DataSourceV2Relation) p;
    DataSourceV2Relation fresh = (DataSourceV2Relation) scanned.newInstance();
    LookupTable table = LookupTable.of(fresh);
    Map<ExprId, Expression> outputs = new HashMap<>();
    List<Attribute> below = Scala.list(scanned.output());
    List<Attribute> renamed = Scala.list(fresh.output());
    for (int i = 0; i < below.size(); i++) {
      outputs.put(below.get(i).exprId(), renamed.get(i));
    }
    List<Expression> filters = new ArrayList<>();
    for (int i = path.size() - 1; i >= 0; i--) { // from the relation up
      LogicalPlan node = path.get(i);
      if (node instanceof Filter) {
        Expression condition = ((Filter) node).condition();
        for (Expression c : Expressions.conjuncts(condition)) {
          if (!(correlated && Expressions.isCorrelated(c))) {
            require(c, "a filter of the lookup side");
          } else if (!Expressions.movable(Expressions.withoutOuter(c))) {
            throw new NotRewritten("a correlated condition cannot move: " + c.sql());
          }
        }
        filters.add(Expressions.substitute(condition, outputs));
        continue;
      }
      Map<ExprId, Expression> next = new HashMap<>();
      if (node instanceof CTERelationRef) { // the reference's attributes: the definition's, by place
        List<Attribute> refs = Scala.list(node.output());
        if (refs.size() != below.size()) {
          throw new NotRewritten("a common table expression whose columns the rewrite cannot map");
        }
        for (int k = 0; k < refs.size(); k++) {
          next.put(refs.get(k).exprId(), outputs.get(below.get(k).exprId()));
        }
      } else {
        for (NamedExpression e : Scala.list(((Project) node).projectList())) {
          Expression defined = e instanceof Alias ? ((Alias) e).child() : (Expression) e;
          require(defined, "a column of the lookup side");
          next.put(e.exprId(), Expressions.substitute(defined, outputs));
        }
      }
      outputs = next;
      below = Scala.list(node.output());
    }
    return new LookupSide(table, outputs, Scala.list(side.output()), filters, view);
  }

  private static void require(Expression e, String what) {
    if (!Expressions.movable(e)) {
      throw new NotRewritten(
          what + " is not deterministic, or calls a subquery or a user function: " + e.sql());
    }
    if (!RaiseFree.neverRaises(e)) {
      throw new NotRewritten(
          what + " may raise an error on a row of the table the lookups never fetch (Spark"
              + " evaluates it on every row it scans): " + e.sql());
    }
  }

  String describe() {
    return view != null ? view : "an asynclookup table";
  }
}
