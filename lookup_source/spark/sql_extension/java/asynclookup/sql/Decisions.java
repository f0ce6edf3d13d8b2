package asynclookup.sql;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/**
 * The most recent decisions of the rewrite in this JVM — which join it rewrote or left to Spark,
 * and why — for {@code lookup_source}'s Python side ({@code lookup_metrics}, tests) to read, as
 * lines {@code <outcome>\t<table>\t<function>\t<reason>}.
 */
public final class Decisions {
  private Decisions() {}

  private static final int KEPT = 200;
  private static final Deque<String> RECENT = new ArrayDeque<>();

  static void record(String outcome, String table, String function, String reason) {
    String line =
        outcome + "\t" + clean(table) + "\t" + clean(function) + "\t" + clean(reason);
    synchronized (RECENT) {
      RECENT.addLast(line);
      while (RECENT.size() > KEPT) {
        RECENT.removeFirst();
      }
    }
  }

  private static String clean(String text) {
    return text == null ? "" : text.replace('\t', ' ').replace('\n', ' ');
  }

  /** The recent decisions, oldest first. */
  public static List<String> recent() {
    synchronized (RECENT) {
      return new ArrayList<>(RECENT);
    }
  }

  /** Forget them (tests). */
  public static void clear() {
    synchronized (RECENT) {
      RECENT.clear();
    }
  }
}
