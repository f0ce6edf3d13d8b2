package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.OuterReference;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.types.Metadata;
import scala.Option;
import scala.collection.immutable.Seq;

/** Small operations on Catalyst expressions. */
final class Expressions {
  private Expressions() {}

  /** The conjuncts of {@code e} ({@code a AND b AND c}: a, b, c). */
  static List<Expression> conjuncts(Expression e) {
    List<Expression> out = new ArrayList<>();
    split(e, out);
    return out;
  }

  private static void split(Expression e, List<Expression> out) {
    if (e instanceof And) {
      split(((And) e).left(), out);
      split(((And) e).right(), out);
    } else {
      out.add(e);
    }
  }

  /** {@code a AND b AND ...}, or null for none. */
  static Expression and(List<Expression> conjuncts) {
    Expression result = null;
    for (Expression c : conjuncts) {
      result = result == null ? c : new And(result, c);
    }
    return result;
  }

  /** {@code e} with each attribute whose id is in {@code replacements} replaced. */
  static Expression substitute(Expression e, Map<ExprId, Expression> replacements) {
    return e.transformUp(
        Scala.everywhere(
            node -> {
              if (node instanceof AttributeReference) {
                Expression by = replacements.get(((AttributeReference) node).exprId());
                if (by != null) {
                  return by;
                }
              }
              return node;
            }));
  }

  /**
   * Whether {@code e} may move to another place in the plan and be evaluated on other rows than
   * before with the same result: deterministic, no subquery, no outer reference, and no user
   * function (which might fail, or cost, on rows the original plan never gave it).
   */
  static boolean movable(Expression e) {
    if (!e.deterministic()) {
      return false;
    }
    return e.find(Scala.fn(node -> (Object) unmovable(node))).isEmpty();
  }

  /** Whether {@code e} reads the outer query (a correlated subquery's condition). */
  static boolean isCorrelated(Expression e) {
    return e.find(Scala.fn(node -> (Object) (node instanceof OuterReference))).isDefined();
  }

  /** {@code e} with each outer reference replaced by the attribute it names. */
  static Expression withoutOuter(Expression e) {
    return e.transformUp(
        Scala.everywhere(
            node -> node instanceof OuterReference ? (Expression) ((OuterReference) node).e() : node));
  }

  private static boolean unmovable(Expression node) {
    if (node instanceof SubqueryExpression || node instanceof OuterReference) {
      return true;
    }
    String name = node.getClass().getSimpleName();
    return name.contains("UDF") || name.contains("UserDefined");
  }

  /** Whether {@code e} reads any of {@code attributes}. */
  static boolean referencesAny(Expression e, AttributeSet attributes) {
    for (Attribute a : Scala.list(e.references().toSeq())) {
      if (attributes.contains(a)) {
        return true;
      }
    }
    return false;
  }

  static boolean referencesOnly(Expression e, AttributeSet attributes) {
    AttributeSet references = e.references();
    return !references.isEmpty() && references.subsetOf(attributes);
  }

  /** {@code child AS name} with the given id and qualifier (the join's own attributes). */
  static Alias alias(Expression child, String name, ExprId id, Seq<String> qualifier) {
    return new Alias(child, name, id, qualifier, Option.empty(), Scala.seq());
  }

  /** The same, carrying {@code metadata} (a watermark's delay, a char type's length...). */
  static Alias alias(
      Expression child, String name, ExprId id, Seq<String> qualifier, Metadata metadata) {
    return new Alias(child, name, id, qualifier, Option.apply(metadata), Scala.seq());
  }

  static Alias alias(Expression child, String name, ExprId id) {
    return alias(child, name, id, Scala.seq());
  }

  /** A reference to the table function's output column {@code name}, resolved by the analyzer. */
  static UnresolvedAttribute column(String name) {
    return new UnresolvedAttribute(Scala.seq(name));
  }

  /** A resolved reference to the attribute an {@link #alias} with this id will produce. */
  static AttributeReference reference(
      String name, org.apache.spark.sql.types.DataType type, boolean nullable, ExprId id) {
    return new AttributeReference(name, type, nullable, Metadata.empty(), id, Scala.seq());
  }

  /** The ids of {@code attributes}. */
  static Set<Long> ids(List<Attribute> attributes) {
    Set<Long> ids = new HashSet<>();
    for (Attribute a : attributes) {
      ids.add(a.exprId().id());
    }
    return ids;
  }

  /** The ids of the attributes {@code e} reads. */
  static Set<Long> readIds(Expression e) {
    return ids(Scala.list(e.references().toSeq()));
  }

  static boolean sameId(Attribute a, Attribute b) {
    return a.exprId().equals(b.exprId());
  }
}
