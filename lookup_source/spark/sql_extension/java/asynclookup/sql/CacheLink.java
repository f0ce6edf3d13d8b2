package asynclookup.sql;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Union$;
import org.apache.spark.sql.types.DataType;

/**
 * Keeps a rewritten join linked to its lookup table where Spark's cache looks for it.
 *
 * <p>Spark drops from its cache every cached query that reads a table when the table is
 * refreshed ({@code REFRESH TABLE users}, {@code spark.catalog.refreshTable}) or uncached with
 * its dependents: it looks for the table's plan in each cached query's plan. A rewritten join no
 * longer reads the table's relation, so a cached query joining it would be kept, and answer
 * from the cache, where Spark's own join is read again. The rewrite therefore keeps the
 * relation beside the lookups, in a branch that reads nothing: {@code UNION ALL} of the lookups
 * and the relation under {@code LIMIT 0}. Spark's optimizer removes that branch before it plans
 * any scan (its {@code OptimizeLimitZero} and {@code PropagateEmptyRelation}, which run before
 * the scans are built): nothing of it runs, and the rows are the lookups' alone. A stream's
 * joins are not linked (a stream is not cached; a batch relation beside it is not allowed).
 */
final class CacheLink {
  /** Scala's {@code Literal.default}, looked up once (null: no link is made). */
  private static final Method DEFAULT = defaultMethod();

  private CacheLink() {}

  /** {@code rewritten} linked to {@code relation} (the lookup table's, as the join read it); as
   * it is where it cannot be (a stream, a column type Spark has no default value of). */
  static LogicalPlan linked(LogicalPlan rewritten, LogicalPlan relation) {
    if (DEFAULT == null || rewritten.isStreaming() || !rewritten.resolved()) {
      return rewritten;
    }
    List<NamedExpression> nothing = new ArrayList<>();
    try {
      for (Attribute a : Scala.list(rewritten.output())) {
        // a value of the column's type that is not null: the union's columns stay as nullable
        // as the lookups'
        Literal value = defaultOf(a.dataType());
        nothing.add(Expressions.alias(value, a.name(), NamedExpression$.MODULE$.newExprId()));
      }
    } catch (RuntimeException | ReflectiveOperationException noDefault) {
      return rewritten;
    }
    LogicalPlan readsNothing =
        new Project(
            Scala.seq(nothing),
            new LocalLimit(Literal$.MODULE$.apply(0), relation));
    return Union$.MODULE$.apply(rewritten, readsNothing);
  }

  /** {@code Literal.default(type)}: Spark's value of the type that is not null (Scala's
   * {@code default}, a word Java keeps for itself, is called by name). */
  private static Literal defaultOf(DataType type) throws ReflectiveOperationException {
    return (Literal) DEFAULT.invoke(Literal$.MODULE$, type);
  }

  private static Method defaultMethod() {
    try {
      return Literal$.class.getMethod("default", DataType.class);
    } catch (NoSuchMethodException error) {
      return null;
    }
  }

  /** Whether {@code plan} reads nothing of what is below it (a {@code LIMIT 0}, as a link's
   * branch is): the rule does not count a table read there as read. */
  static boolean readsNothing(LogicalPlan plan) {
    if (plan instanceof LocalLimit) {
      return isZero(((LocalLimit) plan).limitExpr());
    }
    if (plan instanceof GlobalLimit) {
      return isZero(((GlobalLimit) plan).limitExpr());
    }
    return false;
  }

  private static boolean isZero(org.apache.spark.sql.catalyst.expressions.Expression limit) {
    return limit.foldable() && Integer.valueOf(0).equals(limit.eval(null));
  }
}
