package asynclookup.sql;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.classic.SparkSession;

/**
 * An analyzer rule: an inner or left outer equi-join whose other side is an asynclookup lookup
 * table becomes a call of the table's lookup table function on the join's input ({@link
 * JoinRewrite} builds it), so only the input's keys are asked of the store:
 *
 * <pre>
 *   SELECT e.*, u.name FROM events e LEFT JOIN users u ON e.user_id = u.user_id
 *   =&gt; Project [event columns, u.user_id, u.name ... under their own ids]
 *        users_lookup(TABLE(SELECT event columns, user_id AS key FROM events), ...)
 * </pre>
 *
 * The projection on top re-exports every attribute of the join under its original expression
 * id: the rest of the query (WHERE, SELECT, GROUP BY), already bound to them, is untouched.
 *
 * <p>Whatever it cannot rewrite exactly it leaves to Spark, and says why ({@link Decisions}, and
 * at debug level on the {@code asynclookup.sql} logger). The table function has the last word:
 * its {@code analyze} (Python, which knows what the store compares otherwise than Spark) may
 * refuse a rewrite by answering with a single column {@code __asynclookup_veto}, whose metadata
 * says why; the rule then puts the original join back. Any failure of its own leaves the join
 * alone.
 */
public final class LookupJoinRewrite extends Rule<LogicalPlan> {
  /** Marks a join the rule has already decided to leave alone (the analyzer loops). */
  static final TreeNodeTag<String> LEFT_ALONE = new TreeNodeTag<>("asynclookup.leftAlone");

  /** On a rewrite's top projection: the join it replaced, put back if the function refuses. */
  static final TreeNodeTag<Replaced> REPLACED = new TreeNodeTag<>("asynclookup.replaced");

  /** The column a table function answers with when it refuses a rewrite. */
  static final String VETO = Names.PREFIX + "veto";

  private final SparkSession session;

  public LookupJoinRewrite(org.apache.spark.sql.SparkSession session) {
    this.session = (SparkSession) session;
  }

  /** A rewritten join, for when its table function refuses. */
  static final class Replaced {
    final Join join;
    final String table;

    Replaced(Join join, String table) {
      this.join = join;
      this.table = table;
    }
  }

  @Override
  public String ruleName() {
    return "asynclookup.LookupJoinRewrite";
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!Settings.joinsEnabled()) {
      return plan;
    }
    Set<String> named = namesInUse(plan);
    return plan.resolveOperatorsUp(
        Scala.everywhere(
            p -> {
              if (p instanceof Join) {
                return attempt((Join) p, named);
              }
              return p.getTagValue(REPLACED).isDefined() ? refused(p) : p;
            }));
  }

  private LogicalPlan attempt(Join join, Set<String> named) {
    if (!join.resolved() || join.getTagValue(LEFT_ALONE).isDefined()) {
      return join;
    }
    boolean onRight = LookupSide.looksLikeOne(join.right());
    if (!onRight && !LookupSide.looksLikeOne(join.left())) {
      return join;
    }
    String table = "an asynclookup table";
    try {
      LookupSide side = LookupSide.of(onRight ? join.right() : join.left());
      table = side.describe();
      hiddenColumnsUnused(join, named);
      JoinRewrite rewritten = JoinRewrite.of(session, join, side, onRight);
      rewritten.plan.setTagValue(REPLACED, new Replaced(join, table));
      AsyncLookupSqlExtensions.LOG.info(
          "asynclookup: the {} JOIN with {} runs as lookups through {} ({})",
          join.joinType().sql(),
          table,
          rewritten.function,
          rewritten.reason);
      Decisions.record("lookup", table, rewritten.function, rewritten.reason);
      return rewritten.plan;
    } catch (NotRewritten why) {
      return leaveAlone(join, table, why.getMessage());
    } catch (RuntimeException | LinkageError error) { // never break a query
      AsyncLookupSqlExtensions.LOG.warn(
          "asynclookup: the JOIN with {} is left to Spark: the rewrite failed: {}",
          table,
          error.toString());
      return leaveAlone(join, table, "the rewrite failed: " + error);
    }
  }

  /** A rewrite whose table function refused it (see the class doc): the join, back. */
  private static LogicalPlan refused(LogicalPlan rewritten) {
    Attribute veto = vetoOf(rewritten);
    if (veto == null) {
      return rewritten;
    }
    Replaced replaced = rewritten.getTagValue(REPLACED).get();
    String reason =
        veto.metadata().contains("reason")
            ? veto.metadata().getString("reason")
            : "the table function refused the rewrite";
    return leaveAlone(replaced.join, replaced.table, reason);
  }

  private static Attribute vetoOf(LogicalPlan plan) {
    if (plan.resolved()) { // (an unresolved node cannot say its output yet)
      for (Attribute a : Scala.list(plan.output())) {
        if (VETO.equals(a.name())) {
          return a;
        }
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      Attribute found = vetoOf(child);
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  private static Join leaveAlone(Join join, String table, String reason) {
    join.setTagValue(LEFT_ALONE, reason);
    AsyncLookupSqlExtensions.LOG.debug(
        "asynclookup: the JOIN with {} is left to Spark: {}", table, reason);
    Decisions.record("spark", table, "", reason);
    return join;
  }

  /**
   * Hidden columns of the join's sides (a file's {@code _metadata}) do not pass through a
   * lookup: a query that names one anywhere keeps Spark's join.
   */
  private static void hiddenColumnsUnused(LogicalPlan plan, Set<String> named) {
    for (Attribute hidden : Scala.list(plan.metadataOutput())) { // any node's, views' inside
      if (named.contains(hidden.name().toLowerCase(java.util.Locale.ROOT))) {
        throw new NotRewritten("the query reads the hidden column " + hidden.name());
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      hiddenColumnsUnused(child, named);
    }
  }

  /** Every name a reference in the plan uses, resolved or not, in lower case. */
  private static Set<String> namesInUse(LogicalPlan plan) {
    Set<String> names = new HashSet<>();
    collectNames(plan, names);
    return names;
  }

  private static void collectNames(LogicalPlan plan, Set<String> names) {
    for (Expression e : Scala.list(plan.expressions())) {
      e.foreach(
          Scala.fn(
              node -> {
                if (node instanceof AttributeReference) {
                  names.add(((AttributeReference) node).name().toLowerCase(java.util.Locale.ROOT));
                } else if (node instanceof UnresolvedAttribute) {
                  List<String> parts = Scala.list(((UnresolvedAttribute) node).nameParts());
                  for (String part : parts) {
                    names.add(part.toLowerCase(java.util.Locale.ROOT));
                  }
                }
                return scala.runtime.BoxedUnit.UNIT;
              }));
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      collectNames(child, names);
    }
  }
}
