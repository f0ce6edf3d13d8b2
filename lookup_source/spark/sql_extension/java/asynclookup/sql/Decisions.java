package asynclookup.sql;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;

/**
 * The most recent decisions of the rewrite in each Spark session — which join it rewrote or left
 * to Spark, and why — for {@code lookup_source}'s Python side ({@code lookup_metrics}, tests) to
 * read, as lines {@code <outcome>\t<table>\t<function>\t<reason>}. Kept per session: a Spark
 * Connect server or a notebook runs several users' sessions in one JVM, and none reads another's
 * (a session forgotten by Spark takes its decisions with it).
 */
public final class Decisions {
  private Decisions() {}

  private static final int KEPT = 200;
  private static final Map<SparkSession, Deque<String>> BY_SESSION =
      Collections.synchronizedMap(new WeakHashMap<>());

  static void record(
      SparkSession session, String outcome, String table, String function, String reason) {
    String line =
        outcome + "\t" + clean(table) + "\t" + clean(function) + "\t" + clean(reason);
    synchronized (BY_SESSION) {
      Deque<String> recent = BY_SESSION.computeIfAbsent(session, s -> new ArrayDeque<>());
      recent.addLast(line);
      while (recent.size() > KEPT) {
        recent.removeFirst();
      }
    }
  }

  private static String clean(String text) {
    return text == null ? "" : text.replace('\t', ' ').replace('\n', ' ');
  }

  /** The recent decisions in {@code session}, oldest first. */
  public static List<String> recent(SparkSession session) {
    synchronized (BY_SESSION) {
      Deque<String> recent = BY_SESSION.get(session);
      return recent == null ? new ArrayList<>() : new ArrayList<>(recent);
    }
  }

  /** Forget those of {@code session} (tests). */
  public static void clear(SparkSession session) {
    synchronized (BY_SESSION) {
      BY_SESSION.remove(session);
    }
  }
}
