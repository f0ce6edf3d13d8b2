package asynclookup.sql;

import java.lang.ref.WeakReference;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.Option;
import scala.Product;

/**
 * One array for each distinct answer a table function's {@code analyze} gave, so that a query
 * analyzed twice compares equal to itself, as Spark's cache needs.
 *
 * <p>Spark keeps what a Python table function's {@code analyze} answered as a pickle in the
 * call ({@code PythonUDTF.pickledAnalyzeResult}, a byte array), and a Scala case class compares
 * arrays by identity: two analyses of one query would never be the same plan, and a rewritten
 * query that is cached ({@code CACHE TABLE v AS ...}, {@code spark.sql(q).cache()}) would be
 * asked of the store again at each read, where Spark's own join reads the cache. The rule makes
 * equal answers the same array.
 */
final class AnalyzeResults {
  private AnalyzeResults() {}

  private static final String FIELD = "pickledAnalyzeResult";
  private static final Map<String, WeakReference<byte[]>> KNOWN = new ConcurrentHashMap<>();

  /** {@code plan} with each table function call's answer the one array of its content. */
  static LogicalPlan shared(LogicalPlan plan) {
    return plan.transformUpWithSubqueries(
        Scala.everywhere(
            p ->
                p instanceof Generate
                    ? p.transformExpressions(Scala.everywhere(AnalyzeResults::sharedIn))
                    : p));
  }

  private static Expression sharedIn(Expression e) {
    if (!"PythonUDTF".equals(e.getClass().getSimpleName()) || !(e instanceof Product)) {
      return e;
    }
    Product call = (Product) e;
    int at = indexOf(call, FIELD);
    if (at < 0 || !(call.productElement(at) instanceof Option)) {
      return e;
    }
    Option<?> given = (Option<?>) call.productElement(at);
    if (given.isEmpty() || !(given.get() instanceof byte[])) {
      return e;
    }
    byte[] bytes = (byte[]) given.get();
    byte[] known = known(bytes);
    return known == bytes ? e : copied(call, at, Option.apply(known), e);
  }

  private static byte[] known(byte[] bytes) {
    String digest = digest(bytes);
    WeakReference<byte[]> kept = KNOWN.get(digest);
    byte[] known = kept == null ? null : kept.get();
    if (known != null && Arrays.equals(known, bytes)) {
      return known;
    }
    if (KNOWN.size() > 4096) {
      KNOWN.values().removeIf(ref -> ref.get() == null);
    }
    KNOWN.put(digest, new WeakReference<>(bytes));
    return bytes;
  }

  private static int indexOf(Product call, String name) {
    Iterator<String> names = scala.jdk.javaapi.CollectionConverters.asJava(call.productElementNames());
    for (int i = 0; names.hasNext(); i++) {
      if (name.equals(names.next())) {
        return i;
      }
    }
    return -1;
  }

  /** {@code call} with element {@code at} replaced, through its case class's {@code copy}. */
  private static Expression copied(Product call, int at, Object value, Expression fallback) {
    for (Method copy : call.getClass().getMethods()) {
      if (copy.getName().equals("copy") && copy.getParameterCount() == call.productArity()) {
        List<Object> args = new ArrayList<>();
        for (int i = 0; i < call.productArity(); i++) {
          args.add(i == at ? value : call.productElement(i));
        }
        try {
          return (Expression) copy.invoke(call, args.toArray());
        } catch (ReflectiveOperationException | RuntimeException error) {
          return fallback; // (the call as it was: only Spark's cache misses it)
        }
      }
    }
    return fallback;
  }

  private static String digest(byte[] bytes) {
    try {
      byte[] sum = MessageDigest.getInstance("SHA-256").digest(bytes);
      StringBuilder hex = new StringBuilder();
      for (byte b : sum) {
        hex.append(String.format("%02x", b));
      }
      return hex.toString();
    } catch (NoSuchAlgorithmException error) {
      return new String(bytes, StandardCharsets.ISO_8859_1);
    }
  }

  /** A digest of {@code text}, as hex (32 characters). */
  static String id(String text) {
    return digest(text.getBytes(StandardCharsets.UTF_8)).substring(0, 32);
  }
}
