package asynclookup.sql;

import java.util.List;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableValuedFunction;
import org.apache.spark.sql.catalyst.expressions.FunctionTableSubqueryArgumentExpression;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * The call {@code <function>(TABLE(<input>), '<keys>', '<how>', '<matched column>', '<mode>',
 * '<conditions on the pairs>', '<what the rule knows of the query>')} ({@link RuleFacts}),
 * unresolved:
 * the analyzer then resolves it as it resolves any call of a Python table function (running its
 * {@code analyze}). Made through the session's SQL parser, whose output is stable across Spark
 * versions where the constructors of these nodes are not, then given the input plan.
 */
final class LookupCall {
  private LookupCall() {}

  static LogicalPlan of(
      ParserInterface parser,
      String function,
      LogicalPlan input,
      List<String> keyColumns,
      String how,
      String matchedColumn,
      String mode,
      String conditions,
      String facts) {
    StringBuilder sql = new StringBuilder("SELECT * FROM ");
    sql.append(quoted(function)).append("(TABLE(").append(quoted(Names.PREFIX + "rows"));
    sql.append("), ").append(literal(String.join(",", keyColumns)));
    sql.append(", ").append(literal(how));
    sql.append(", ").append(literal(matchedColumn));
    sql.append(", ").append(literal(mode));
    sql.append(", ").append(literal(conditions));
    sql.append(", ").append(literal(facts));
    sql.append(")");
    LogicalPlan call;
    try {
      call = find(parser.parsePlan(sql.toString()));
    } catch (Exception error) { // ParseException, checked in Java's eyes
      throw new NotRewritten("the table function call does not parse: " + error.getMessage());
    }
    if (call == null) {
      throw new NotRewritten("this Spark parses a table function call otherwise");
    }
    boolean[] placed = {false};
    LogicalPlan withInput =
            call.transformExpressions(
                Scala.everywhere(
                    e -> {
                      if (e instanceof FunctionTableSubqueryArgumentExpression && !placed[0]) {
                        placed[0] = true;
                        return ((FunctionTableSubqueryArgumentExpression) e).withNewPlan(input);
                      }
                      return e;
                    }));
    if (!placed[0]) {
      throw new NotRewritten("this Spark parses TABLE(...) otherwise");
    }
    return withInput;
  }

  private static LogicalPlan find(LogicalPlan plan) {
    if (plan instanceof UnresolvedTableValuedFunction) {
      return plan;
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      LogicalPlan found = find(child);
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  private static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }

  private static String literal(String text) {
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'";
  }
}
