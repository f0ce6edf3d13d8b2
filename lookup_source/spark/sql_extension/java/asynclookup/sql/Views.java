package asynclookup.sql;

import java.lang.ref.WeakReference;
import java.util.Set;
import org.apache.spark.sql.catalyst.analysis.AnalysisContext;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * SQL views whose text Spark analyzes again at each read: {@code CREATE [GLOBAL] TEMP VIEW v AS
 * ...}, {@code CACHE TABLE v AS ...}, {@code ALTER VIEW v AS ...}.
 *
 * <p>Spark records, when such a view is made, the temporary views and functions its analyzed
 * plan reads, and lets its text see only those when it is read. So the rule leaves a view's
 * definition as Spark analyzed it, subqueries included (a rewritten one no longer reads the
 * lookup table's view, which the view's text names), and rewrites the view's text where it is
 * read; there, the table function the rewrite calls is one the view's text never named, and is
 * let in for this read.
 */
final class Views {
  private Views() {}

  private static final Set<String> DEFINITIONS =
      Set.of(
          "CreateViewCommand",
          "CreateView",
          "CacheTableAsSelect",
          "AlterViewAs",
          "AlterViewAsCommand");

  /**
   * The analysis of a view's definition under way on this thread, if any, known by the set of
   * temporary functions its context collects: its subqueries are analyzed apart, in copies of
   * its context that share that set (a view read inside it starts a set of its own).
   */
  private static final ThreadLocal<WeakReference<Object>> DEFINING = new ThreadLocal<>();

  /** Whether {@code plan} defines a view whose text Spark analyzes again at each read. */
  static boolean defines(LogicalPlan plan) {
    return DEFINITIONS.contains(plan.getClass().getSimpleName());
  }

  /** Whether the analysis under way is of a view's definition, or of a subquery in one. */
  static boolean defining() {
    WeakReference<Object> defining = DEFINING.get();
    return defining != null && defining.get() == analysis();
  }

  private static Object analysis() {
    return AnalysisContext.get().referredTempFunctionNames();
  }

  /**
   * Notes, before any subquery of it is analyzed, that the plan being analyzed defines a view
   * (a rule of Spark's first batch of analysis, "Hints", which sees the statement as parsed).
   */
  static final class Definitions extends Rule<LogicalPlan> {
    @Override
    public String ruleName() {
      return "asynclookup.viewDefinitions";
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (defines(plan)) {
        DEFINING.set(new WeakReference<>(analysis()));
      }
      return plan;
    }
  }

  /** Whether the analysis under way is of a view's text, read by a query this rule cannot see
   * (Spark analyzes it alone, then places it in that query). */
  static boolean reading() {
    return !AnalysisContext.get().catalogAndNamespace().isEmpty();
  }

  /**
   * Lets the analysis of a view's text under way resolve the temporary table function {@code
   * name} (outside a view, every temporary function resolves).
   */
  static void admit(String name) {
    if (reading()) {
      AnalysisContext.get().referredTempFunctionNames().add(name);
    }
  }
}
