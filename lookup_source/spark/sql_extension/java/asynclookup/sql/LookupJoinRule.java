package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationDef;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.WithCTE;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.Metadata;

/**
 * The analyzer rule: a join against an asynclookup lookup table runs as lookups of the other
 * side's keys, so only those are asked of the store, and gives Spark's join's rows.
 *
 * <p>It finds the joins ({@link JoinShape}): {@code JOIN ... ON} (inner, left outer, left semi,
 * left anti; the table on either side of an inner join), a comma join or {@code CROSS JOIN}
 * whose {@code WHERE} equates the keys, and {@code [NOT] EXISTS} and {@code IN} subqueries of
 * a {@code WHERE}; then builds one of two plans:
 *
 * <ul>
 *   <li>{@link DirectLookupPlan}: the table function takes the join's place — whenever every
 *       condition can be evaluated where Spark would (inner joins; left and anti joins whose
 *       conditions on the input cannot raise and read no table value; semi joins reading no
 *       table value);
 *   <li>{@link KeysFirstPlan}: Spark's join stays, against the table's rows for the input's
 *       keys, looked up — for the other left, semi and anti joins (not in a stream).
 * </ul>
 *
 * <p>Whatever it cannot rewrite exactly it leaves to Spark, and says why ({@link Decisions}, per
 * session, and at debug level on the {@code asynclookup.sql} logger). The table function has the
 * last word: its {@code analyze} (Python, which knows the store) may refuse a rewrite by
 * answering with a single column {@code __asynclookup_veto}, whose metadata says why; the rule
 * then puts the original back. Any failure of its own leaves the plan alone. An accepted rewrite
 * keeps its table's relation beside it, in a branch that reads nothing, so that Spark's cache
 * finds the table in a cached query that joins it ({@link CacheLink}).
 */
public final class LookupJoinRule extends Rule<LogicalPlan> {
  /** Marks a node the rule has already decided to leave alone (the analyzer loops). */
  static final TreeNodeTag<String> LEFT_ALONE = new TreeNodeTag<>("asynclookup.leftAlone");

  /** On a rewrite's top node: what it replaced, put back if the function refuses. */
  static final TreeNodeTag<Replaced> REPLACED = new TreeNodeTag<>("asynclookup.replaced");

  /** The column a table function answers with when it refuses a rewrite. */
  static final String VETO = Contract.VETO_COLUMN;

  private final SparkSession session;

  public LookupJoinRule(org.apache.spark.sql.SparkSession session) {
    this.session = (SparkSession) session;
  }

  /** A rewritten plan's original, for when its table function refuses; what it is, for the
   * decision recorded when the function accepts. */
  static final class Replaced {
    final LogicalPlan original;
    final String table;
    final String function;
    final String written;
    final String how;
    /** The rewrite's id: its table function's decision comes under a metadata key with it. */
    final String id;
    /** The lookup table's relation, kept beside the lookups for Spark's cache: {@link
     * CacheLink}. */
    final LogicalPlan relation;
    /** Whether the rewrite's decision was recorded (the analyzer passes it again). */
    boolean recorded;
    /** Whether the rewrite was linked to its table ({@link CacheLink}), once resolved. */
    boolean linked;

    Replaced(
        LogicalPlan original,
        String table,
        String function,
        String written,
        String how,
        String id,
        LogicalPlan relation) {
      this.original = original;
      this.table = table;
      this.function = function;
      this.written = written;
      this.how = how;
      this.id = id;
      this.relation = relation;
    }
  }

  @Override
  public String ruleName() {
    return "asynclookup.LookupJoinRule";
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    try {
      if (!Settings.joinsEnabled(session) || Views.defines(plan) || Views.defining()) {
        return plan; // (a view's definition, subqueries included: rewritten where it is read)
      }
      return rewriteAll(plan);
    } catch (Exception | LinkageError | AssertionError | StackOverflowError error) { // never break a query
      AsyncLookupSqlExtensions.LOG.warn(
          "asynclookup: the plan is left to Spark: the rule failed: {}", error.toString());
      return plan;
    }
  }

  private LogicalPlan rewriteAll(LogicalPlan plan) {
    Map<String, Integer> named = namesInUse(plan);
    Map<Long, CTERelationDef> ctes = new HashMap<>();
    collectCtes(plan, ctes);
    // what the nodes above a join do decides what the rewrite may take (RaisingRows)
    RaisingRows rows = readsLookupTable(plan) ? RaisingRows.of(plan, Views.reading()) : null;
    return plan.resolveOperatorsUp(
        Scala.everywhere(
            p -> {
              if (p.getTagValue(REPLACED).isDefined()) {
                return refused(p);
              }
              if (rows == null
                  || !p.resolved()
                  || p.getTagValue(LEFT_ALONE).isDefined()
                  || !rows.judges(p)) {
                return p; // (a node this pass cannot judge: the analyzer's next pass does)
              }
              if (p instanceof Join) {
                return onJoin((Join) p, null, p, named, ctes, rows);
              }
              if (p instanceof Filter) {
                return onFilter((Filter) p, named, ctes, rows);
              }
              return p;
            }));
  }

  private LogicalPlan onFilter(
      Filter filter,
      Map<String, Integer> named,
      Map<Long, CTERelationDef> ctes,
      RaisingRows rows) {
    LogicalPlan child = filter.child();
    if (child instanceof Join
        && ((Join) child).condition().isEmpty()
        && JoinShape.innerOrCross((Join) child)
        && filter.condition().deterministic()
        && !hasSubquery(filter.condition())
        && isLookupJoin((Join) child, ctes)) { // a comma join: its WHERE is its condition
      return onJoin((Join) child, filter.condition(), filter, named, ctes, rows);
    }
    List<Expression> conjuncts = Expressions.conjuncts(filter.condition());
    for (int i = 0; i < conjuncts.size(); i++) {
      LogicalPlan sub = JoinShape.subqueryPlan(conjuncts.get(i));
      if (sub != null && LookupSide.looksLikeOne(sub, ctes)) {
        return onSubquery(filter, conjuncts, i, named, ctes, rows);
      }
    }
    return filter;
  }

  private static boolean isLookupJoin(Join join, Map<Long, CTERelationDef> ctes) {
    return LookupSide.looksLikeOne(join.right(), ctes) || LookupSide.looksLikeOne(join.left(), ctes);
  }

  private LogicalPlan onJoin(
      Join join,
      Expression where,
      LogicalPlan original,
      Map<String, Integer> named,
      Map<Long, CTERelationDef> ctes,
      RaisingRows rows) {
    if (!isLookupJoin(join, ctes) || join.getTagValue(LEFT_ALONE).isDefined() && where == null) {
      return original;
    }
    String table = "an asynclookup table";
    try {
      JoinShape shape = JoinShape.ofJoin(join, where, ctes);
      table = shape.side.describe();
      rows.checkAbove(original, shape);
      hiddenColumnsUnused(join, named);
      return rewritten(shape, original, original, table, rows);
    } catch (NotRewritten why) {
      return leaveAlone(original, table, why.getMessage());
    } catch (Exception | LinkageError | AssertionError error) { // never break a query
      return failed(original, table, error);
    }
  }

  /** A WHERE whose conjunct {@code at} is a subquery against a lookup table: the other
   * conjuncts filter the input first (as Spark's own rewrite of subqueries does). */
  private LogicalPlan onSubquery(
      Filter filter,
      List<Expression> conjuncts,
      int at,
      Map<String, Integer> named,
      Map<Long, CTERelationDef> ctes,
      RaisingRows rows) {
    String table = "an asynclookup table";
    try {
      List<Expression> plain = new ArrayList<>();
      List<Expression> subqueries = new ArrayList<>();
      for (int i = 0; i < conjuncts.size(); i++) {
        if (i != at) {
          (hasSubquery(conjuncts.get(i)) ? subqueries : plain).add(conjuncts.get(i));
        }
      }
      LogicalPlan child = filter.child();
      LogicalPlan input = plain.isEmpty() ? child : new Filter(Expressions.and(plain), child);
      JoinShape shape = JoinShape.ofSubquery(conjuncts.get(at), input, ctes);
      table = shape.side.describe();
      rows.checkAbove(filter, shape);
      hiddenColumnsUnused(child, named);
      // what the rewrite replaces: this conjunct and the plain ones (the other subqueries stay
      // above it, for the rule's next pass), put back as it was if the function refuses
      List<Expression> replaced = new ArrayList<>(plain);
      replaced.add(conjuncts.get(at));
      LogicalPlan original =
          subqueries.isEmpty() ? filter : new Filter(Expressions.and(replaced), child);
      LogicalPlan plan = rewritten(shape, original, filter, table, rows);
      return subqueries.isEmpty() ? plan : new Filter(Expressions.and(subqueries), plan);
    } catch (NotRewritten why) {
      return leaveAlone(filter, table, why.getMessage());
    } catch (Exception | LinkageError | AssertionError error) { // never break a query
      return failed(filter, table, error);
    }
  }

  /** The plan that answers {@code shape} by lookups; tagged with what it replaces. */
  private LogicalPlan rewritten(
      JoinShape shape, LogicalPlan original, LogicalPlan written, String table, RaisingRows rows) {
    if (Expressions.isCorrelated(shape.condition) || hasOuterReference(shape.input)) {
      throw new NotRewritten("the join reads the outer query of a correlated subquery");
    }
    if (recursive(shape.input)) {
      throw new NotRewritten("the input reads a recursive common table expression's own rows");
    }
    CachedSide.check(session, shape.sidePlan, shape.side.table.relation);
    if (shape.kind == JoinShape.Kind.NOT_IN && !RaiseFree.neverRaises(shape.notInValue)) {
      throw new NotRewritten(
          "a NOT IN value that may raise an error (Spark's join computes it only where the table"
              + " has rows)");
    }
    Conditions conditions = Conditions.of(shape.condition, shape.side, shape.input.outputSet());
    rows.checkInput(written, shape.input, shape.condition, conditions.keys);
    String function = TableFunctions.functionFor(session, shape.side.table);
    // the table function judges the table's strategy by Spark's estimate of the input's rows
    // the rewrite's id: the same for the same join, so that a query analyzed twice is the same
    // plan (Spark's cache compares them; AnalyzeResults)
    long inputRows = InputRows.of(shape.input);
    String id =
        AnalyzeResults.id(
            String.join(
                "\n",
                function,
                shape.kind.how,
                String.valueOf(original.semanticHash()),
                RuleFacts.json(inputRows, shape.side.table.keyNames(), "")));
    String facts = RuleFacts.json(inputRows, shape.side.table.keyNames(), id);
    boolean direct = direct(shape, conditions);
    LogicalPlan plan =
        direct
            ? DirectLookupPlan.of(session, shape, conditions, function, facts)
            : KeysFirstPlan.of(session, shape, conditions, function, facts);
    String how = direct ? "as lookups" : "as Spark's join against the lookups of its keys";
    plan.setTagValue(
        REPLACED,
        new Replaced(
            original,
            table,
            function,
            shape.written,
            how,
            id,
            shape.side.table.relation.newInstance())); // (ids of its own, for CacheLink)
    return plan;
  }

  /** Whether the table function can take the join's place (see the class doc). */
  private static boolean direct(JoinShape shape, Conditions conditions) {
    switch (shape.kind) {
      case INNER:
      case NOT_IN: // (its only condition is the key's)
        return true;
      case SEMI:
        return conditions.onValues.isEmpty();
      default: // LEFT, ANTI: their conditions on the input move to every input row
        return conditions.onValues.isEmpty() && conditions.inputNeverRaises();
      // (conditions.onPairs: judged by the table function on each pair, in every kind)
    }
  }

  /**
   * A rewrite, once its table function has answered (see the class doc): the original back when
   * it refused; else the rewrite, its decision recorded once, with the reason the table
   * function gave (its metadata {@code asynclookup.decision} on a key column of its answer).
   */
  private LogicalPlan refused(LogicalPlan rewritten) {
    Replaced replaced = rewritten.getTagValue(REPLACED).get();
    Attribute veto = vetoOf(rewritten);
    if (veto != null) {
      String reason = text(veto.metadata(), Contract.VETO_REASON);
      return leaveAlone(
          replaced.original,
          replaced.table,
          reason != null ? reason : "the table function refused the rewrite");
    }
    if (!replaced.recorded) {
      String decision =
          decisionOf(rewritten, Contract.DECISION_METADATA + "." + replaced.id);
      if (decision == null && !rewritten.resolved()) {
        return rewritten; // (its table function has not answered yet)
      }
      replaced.recorded = true;
      String reason = decision != null ? decision : "the table function took it";
      AsyncLookupSqlExtensions.LOG.info(
          "asynclookup: the {} with {} runs {} through {} ({})",
          replaced.written,
          replaced.table,
          replaced.how,
          replaced.function,
          reason);
      Decisions.record(
          session,
          Contract.DECISION_LOOKUP,
          replaced.table,
          replaced.function,
          reason + "; " + replaced.how);
    }
    if (!rewritten.resolved()) {
      return rewritten;
    }
    LogicalPlan shared = AnalyzeResults.shared(rewritten);
    if (replaced.linked) {
      return shared;
    }
    // linked to its table once, when resolved (the next passes see the tag below the link)
    replaced.linked = true;
    return CacheLink.linked(shared, replaced.relation);
  }

  private static Attribute vetoOf(LogicalPlan plan) {
    return firstInOutputs(plan, a -> VETO.equals(a.name()) ? a : null);
  }

  /** The reason this rewrite's table function gave (under {@code key}, which carries the
   * rewrite's id: no user column or other rewrite below has it) for running the join as
   * lookups, or null. */
  private static String decisionOf(LogicalPlan plan, String key) {
    return firstInOutputs(plan, a -> text(a.metadata(), key));
  }

  /** The first non-null {@code pick} of a column of {@code plan} or of a node below it, top
   * down (an unresolved node cannot say its output yet: skipped, its children not). */
  private static <T> T firstInOutputs(LogicalPlan plan, Function<Attribute, T> pick) {
    if (plan.resolved()) {
      for (Attribute a : Scala.list(plan.output())) {
        T found = pick.apply(a);
        if (found != null) {
          return found;
        }
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      T found = firstInOutputs(child, pick);
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  /** The text under {@code key} in {@code metadata}, or null (none, or not a text: a user's
   * column may carry anything). */
  private static String text(Metadata metadata, String key) {
    if (!metadata.contains(key)) {
      return null;
    }
    try {
      return metadata.getString(key);
    } catch (RuntimeException notText) {
      return null;
    }
  }

  private LogicalPlan leaveAlone(LogicalPlan original, String table, String reason) {
    original.setTagValue(LEFT_ALONE, reason);
    AsyncLookupSqlExtensions.LOG.debug(
        "asynclookup: the join with {} is left to Spark: {}", table, reason);
    Decisions.record(session, Contract.DECISION_SPARK, table, "", reason);
    return original;
  }

  private LogicalPlan failed(LogicalPlan original, String table, Throwable error) {
    AsyncLookupSqlExtensions.LOG.warn(
        "asynclookup: the join with {} is left to Spark: the rewrite failed: {}",
        table,
        error.toString());
    return leaveAlone(original, table, "the rewrite failed: " + error);
  }

  /**
   * Hidden columns of the input (a file's {@code _metadata}, the other side's key of a {@code
   * USING} join) do not pass through a lookup: a query that reads one keeps Spark's join. Read
   * means: referenced by its id anywhere, or named where no column of the input has that name.
   */
  private static void hiddenColumnsUnused(LogicalPlan input, Map<String, Integer> named) {
    Set<String> shown = new HashSet<>();
    for (Attribute a : Scala.list(input.output())) {
      shown.add(a.name().toLowerCase(Locale.ROOT));
    }
    Map<String, Integer> inside = namesInUse(input); // the input's own uses stay with it
    checkHidden(input, named, inside, shown);
  }

  private static void checkHidden(
      LogicalPlan plan,
      Map<String, Integer> named,
      Map<String, Integer> inside,
      Set<String> shown) {
    for (Attribute hidden : Scala.list(plan.metadataOutput())) { // any node's, views' inside
      String name = hidden.name().toLowerCase(Locale.ROOT);
      if (usedOutside("#" + hidden.exprId().id(), named, inside)
          || (usedOutside(name, named, inside) && !shown.contains(name))) {
        throw new NotRewritten("the query reads the hidden column " + hidden.name());
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      checkHidden(child, named, inside, shown);
    }
  }

  private static boolean usedOutside(
      String name, Map<String, Integer> named, Map<String, Integer> inside) {
    return named.getOrDefault(name, 0) > inside.getOrDefault(name, 0);
  }

  /** How often each name is used by an unresolved reference (lower case), and each id by a
   * resolved one (as {@code #<id>}). */
  private static Map<String, Integer> namesInUse(LogicalPlan plan) {
    Map<String, Integer> names = new HashMap<>();
    collectNames(plan, names);
    return names;
  }

  private static void collectNames(LogicalPlan plan, Map<String, Integer> names) {
    for (Expression e : Scala.list(plan.expressions())) {
      e.foreach(
          Scala.fn(
              node -> {
                if (node instanceof AttributeReference) {
                  names.merge("#" + ((AttributeReference) node).exprId().id(), 1, Integer::sum);
                } else if (node instanceof UnresolvedAttribute) {
                  for (String part : Scala.list(((UnresolvedAttribute) node).nameParts())) {
                    names.merge(part.toLowerCase(Locale.ROOT), 1, Integer::sum);
                  }
                } else if (node instanceof SubqueryExpression) {
                  collectNames(((SubqueryExpression) node).plan(), names);
                }
                return scala.runtime.BoxedUnit.UNIT;
              }));
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      collectNames(child, names);
    }
  }

  private static void collectCtes(LogicalPlan plan, Map<Long, CTERelationDef> ctes) {
    if (plan instanceof WithCTE) {
      for (CTERelationDef def : Scala.list(((WithCTE) plan).cteDefs())) {
        ctes.put(def.id(), def);
      }
    }
    for (Expression e : Scala.list(plan.expressions())) {
      e.foreach(
          Scala.fn(
              node -> {
                if (node instanceof SubqueryExpression) {
                  collectCtes(((SubqueryExpression) node).plan(), ctes);
                }
                return scala.runtime.BoxedUnit.UNIT;
              }));
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      collectCtes(child, ctes);
    }
  }

  /** Whether {@code plan} reads the rows of a recursive CTE being built (Spark 4.1+), which
   * may not sit inside a table function's argument. */
  private static boolean recursive(LogicalPlan plan) {
    String name = plan.getClass().getSimpleName();
    if (name.startsWith("UnionLoop")) {
      return true;
    }
    if (plan instanceof org.apache.spark.sql.catalyst.plans.logical.CTERelationRef) {
      try {
        Object flag = plan.getClass().getMethod("recursive").invoke(plan);
        if (Boolean.TRUE.equals(flag)) {
          return true;
        }
      } catch (ReflectiveOperationException older) { // a Spark without recursive CTEs
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      if (recursive(child)) {
        return true;
      }
    }
    return false;
  }

  /** Whether {@code plan} reads an asynclookup relation, in a subquery too. */
  private static boolean readsLookupTable(LogicalPlan plan) {
    if (LookupTable.isLookupRelation(plan)) {
      return true;
    }
    for (Expression e : Scala.list(plan.expressions())) {
      if (e.find(
              Scala.fn(
                  n ->
                      (Object)
                          (n instanceof SubqueryExpression
                              && readsLookupTable(((SubqueryExpression) n).plan()))))
          .isDefined()) {
        return true;
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      if (readsLookupTable(child)) {
        return true;
      }
    }
    return false;
  }

  private static boolean hasSubquery(Expression e) {
    return e.find(Scala.fn(n -> (Object) (n instanceof SubqueryExpression))).isDefined();
  }

  private static boolean hasOuterReference(LogicalPlan plan) {
    for (Expression e : Scala.list(plan.expressions())) {
      if (Expressions.isCorrelated(e)) {
        return true;
      }
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      if (hasOuterReference(child)) {
        return true;
      }
    }
    return false;
  }
}
