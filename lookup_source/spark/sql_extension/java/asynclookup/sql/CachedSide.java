package asynclookup.sql;

import java.lang.reflect.Method;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.CacheManager;
import scala.Option;

/**
 * Whether Spark answers a lookup side from its cache ({@code CACHE TABLE users}, {@code
 * users_df.cache()}): its own join then reads the rows the cache holds, which the store may no
 * longer hold, so a rewrite into lookups would answer otherwise; such a join stays Spark's.
 */
final class CachedSide {
  private CachedSide() {}

  /** Throws {@link NotRewritten} when the cache holds {@code side}, a plan below it, or the
   * side's {@code relation} (read through a common table expression, say). */
  static void check(SparkSession session, LogicalPlan side, LogicalPlan relation) {
    CacheManager cache = session.sharedState().cacheManager();
    if (cache.isEmpty()) {
      return;
    }
    LogicalPlan p = side;
    while (true) {
      if (holds(cache, session, p) || holds(cache, session, relation)) {
        throw new NotRewritten(
            "Spark caches the lookup table (CACHE TABLE or .cache()): its join reads the cache");
      }
      if (p.children().isEmpty()) {
        return;
      }
      p = p.children().head();
    }
  }

  /** {@code CacheManager.lookupCachedData} by reflection: its parameters differ between
   * Spark's minors ({@code (plan)}, {@code (session, plan)}). */
  private static boolean holds(CacheManager cache, SparkSession session, LogicalPlan plan) {
    for (Method method : CacheManager.class.getMethods()) {
      if (!method.getName().equals("lookupCachedData")) {
        continue;
      }
      Class<?>[] parameters = method.getParameterTypes();
      Object found;
      try {
        if (parameters.length == 1 && parameters[0].isAssignableFrom(LogicalPlan.class)) {
          found = method.invoke(cache, plan);
        } else if (parameters.length == 2
            && parameters[0].isInstance(session)
            && parameters[1].isAssignableFrom(LogicalPlan.class)) {
          found = method.invoke(cache, session, plan);
        } else {
          continue;
        }
      } catch (ReflectiveOperationException error) {
        break;
      }
      return found instanceof Option && ((Option<?>) found).isDefined();
    }
    throw new NotRewritten(
        "Spark holds cached tables, and this Spark's cache cannot be asked whether it holds the"
            + " lookup table");
  }
}
