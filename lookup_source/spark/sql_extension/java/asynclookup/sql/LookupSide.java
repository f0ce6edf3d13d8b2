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
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.ResolvedHint;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

/**
 * One side of a join that is a lookup table, perhaps seen through aliases, views, projections
 * and filters ({@code JOIN (SELECT user_id, upper(name) AS n FROM users WHERE tier = 1) u}):
 * each of the side's output attributes as an expression over the table's columns, and the
 * side's filters over the table's columns.
 */
final class LookupSide {
  final LookupTable table;
  /** The side's output attribute (by id) as an expression over the relation's attributes. */
  final Map<ExprId, Expression> outputs;
  /** Conditions over the relation's attributes that the side's rows satisfy. */
  final List<Expression> filters;
  /** The view the side reads, when it reads one (for messages). */
  final String view;

  private LookupSide(
      LookupTable table, Map<ExprId, Expression> outputs, List<Expression> filters, String view) {
    this.table = table;
    this.outputs = outputs;
    this.filters = filters;
    this.view = view;
  }

  /** Whether {@code side} reads an asynclookup relation through nodes the rewrite follows. */
  static boolean looksLikeOne(LogicalPlan side) {
    LogicalPlan p = side;
    while (p instanceof SubqueryAlias
        || p instanceof View
        || p instanceof Project
        || p instanceof Filter
        || p instanceof ResolvedHint) {
      p = p.children().head();
    }
    return LookupTable.isLookupRelation(p);
  }

  /** The lookup side {@code side} is; throws {@link NotRewritten} when it is not one. */
  static LookupSide of(LogicalPlan side) {
    List<LogicalPlan> path = new ArrayList<>();
    String view = null;
    LogicalPlan p = side;
    while (true) {
      if (p instanceof ResolvedHint) {
        throw new NotRewritten("a join hint asks for Spark's join: " + ((ResolvedHint) p).hints());
      }
      if (p instanceof View && view == null) {
        view = ((View) p).desc().identifier().unquotedString();
      }
      if (p instanceof SubqueryAlias || p instanceof View) {
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
    LookupTable table = LookupTable.of((DataSourceV2Relation) p);
    Map<ExprId, Expression> outputs = new HashMap<>();
    for (Attribute a : Scala.list(p.output())) {
      outputs.put(a.exprId(), a);
    }
    List<Expression> filters = new ArrayList<>();
    for (int i = path.size() - 1; i >= 0; i--) { // from the relation up
      LogicalPlan node = path.get(i);
      if (node instanceof Filter) {
        Expression condition = ((Filter) node).condition();
        require(condition, "a filter of the lookup side");
        filters.add(Expressions.substitute(condition, outputs));
      } else {
        Map<ExprId, Expression> next = new HashMap<>();
        for (NamedExpression e : Scala.list(((Project) node).projectList())) {
          Expression defined = e instanceof Alias ? ((Alias) e).child() : (Expression) e;
          require(defined, "a column of the lookup side");
          next.put(e.exprId(), Expressions.substitute(defined, outputs));
        }
        outputs = next;
      }
    }
    return new LookupSide(table, outputs, filters, view);
  }

  private static void require(Expression e, String what) {
    if (!Expressions.movable(e)) {
      throw new NotRewritten(
          what + " is not deterministic, or calls a subquery or a user function: " + e.sql());
    }
  }

  String describe() {
    return view != null ? view : "an asynclookup table";
  }
}
