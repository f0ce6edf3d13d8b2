package asynclookup.sql;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * A copy of a plan whose output attributes have new expression ids, everywhere in the plan they
 * appear (where they are made and where they are used, subqueries included).
 *
 * <p>The rewrite moves the join's input inside the table function's {@code TABLE(...)} argument
 * and re-exports its columns above the call under their original ids, so that the rest of the
 * query binds unchanged; the copy inside must then use other ids, or one id would be made in two
 * places, which Spark's optimizer assumes never happens. The copy is checked: if an original id
 * is left anywhere in it (a node that keeps an attribute outside its expressions), {@link
 * NotRewritten} is thrown and the join is left to Spark.
 */
final class FreshIds {
  final LogicalPlan plan;
  /** Original id -> the attribute it became in {@link #plan}. */
  final Map<ExprId, Attribute> renamed;

  private FreshIds(LogicalPlan plan, Map<ExprId, Attribute> renamed) {
    this.plan = plan;
    this.renamed = renamed;
  }

  static FreshIds of(LogicalPlan original) {
    Map<ExprId, ExprId> ids = new HashMap<>();
    for (Attribute a : Scala.list(original.output())) {
      ids.put(a.exprId(), NamedExpression.newExprId());
    }
    LogicalPlan copy = rename(original, ids);
    Map<ExprId, Attribute> renamed = new HashMap<>();
    List<Attribute> before = Scala.list(original.output());
    List<Attribute> after = Scala.list(copy.output());
    if (before.size() != after.size()) {
      throw new NotRewritten("the join's input changed shape when copied");
    }
    for (int i = 0; i < before.size(); i++) {
      Attribute a = before.get(i);
      Attribute b = after.get(i);
      if (!b.exprId().equals(ids.get(a.exprId())) || !b.dataType().sameType(a.dataType())) {
        throw new NotRewritten("the join's input could not be copied with new ids");
      }
      renamed.put(a.exprId(), b);
    }
    if (mentions(copy, ids)) {
      throw new NotRewritten("the join's input keeps an attribute where it cannot be renamed");
    }
    return new FreshIds(copy, renamed);
  }

  private static LogicalPlan rename(LogicalPlan plan, Map<ExprId, ExprId> ids) {
    LogicalPlan withChildren = plan.mapChildren(Scala.fn(child -> rename(child, ids)));
    return withChildren.transformExpressions(Scala.everywhere(e -> renameIn(e, ids)));
  }

  private static Expression renameIn(Expression expression, Map<ExprId, ExprId> ids) {
    return expression.transformUp(
        Scala.everywhere(
            e -> {
              if (e instanceof AttributeReference) {
                ExprId to = ids.get(((AttributeReference) e).exprId());
                return to == null ? e : ((AttributeReference) e).withExprId(to);
              }
              if (e instanceof Alias) {
                Alias alias = (Alias) e;
                ExprId to = ids.get(alias.exprId());
                return to == null
                    ? e
                    : new Alias(
                        alias.child(),
                        alias.name(),
                        to,
                        alias.qualifier(),
                        alias.explicitMetadata(),
                        alias.nonInheritableMetadataKeys());
              }
              if (e instanceof SubqueryExpression) {
                SubqueryExpression subquery = (SubqueryExpression) e;
                return subquery.withNewPlan(rename(subquery.plan(), ids));
              }
              return e;
            }));
  }

  /** Whether any of the original ids is still in {@code plan}, in any node or subquery. */
  private static boolean mentions(LogicalPlan plan, Map<ExprId, ExprId> ids) {
    for (Expression e : Scala.list(plan.expressions())) {
      boolean found =
          e.find(
                  Scala.fn(
                      node -> {
                        if (node instanceof NamedExpression
                            && ids.containsKey(((NamedExpression) node).exprId())) {
                          return (Object) Boolean.TRUE;
                        }
                        if (node instanceof SubqueryExpression) {
                          return (Object) mentions(((SubqueryExpression) node).plan(), ids);
                        }
                        return (Object) Boolean.FALSE;
                      }))
              .isDefined();
      if (found) {
        return true;
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      if (mentions(child, ids)) {
        return true;
      }
    }
    return false;
  }
}
