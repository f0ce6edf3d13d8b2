package asynclookup.sql;

import java.util.Set;
import org.apache.spark.sql.catalyst.analysis.AnalysisContext;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * SQL views whose text Spark analyzes again at each read: {@code CREATE [GLOBAL] TEMP VIEW v AS
 * ...}, {@code CACHE TABLE v AS ...}, {@code ALTER VIEW v AS ...}.
 *
 * <p>Spark records, when such a view is made, the temporary views and functions its analyzed
 * plan reads, and lets its text see only those when it is read. So the rule leaves a view's
 * definition as Spark analyzed it (a rewritten one no longer reads the lookup table's view,
 * which the view's text names), and rewrites the view's text where it is read; there, the table
 * function the rewrite calls is one the view's text never named, and is let in for this read.
 */
final class Views {
  private Views() {}

  private static final Set<String> DEFINITIONS =
      Set.of("CreateViewCommand", "CreateView", "CacheTableAsSelect", "AlterViewAs");

  /** Whether {@code plan} defines a view whose text Spark analyzes again at each read. */
  static boolean defines(LogicalPlan plan) {
    return DEFINITIONS.contains(plan.getClass().getSimpleName());
  }

  /**
   * Lets the analysis of a view's text under way resolve the temporary table function {@code
   * name} (outside a view, every temporary function resolves).
   */
  static void admit(String name) {
    AnalysisContext context = AnalysisContext.get();
    if (!context.catalogAndNamespace().isEmpty()) {
      context.referredTempFunctionNames().add(name);
    }
  }
}
