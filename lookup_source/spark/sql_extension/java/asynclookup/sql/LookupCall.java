package asynclookup.sql;

import java.util.List;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableValuedFunction;
import org.apache.spark.sql.catalyst.expressions.FunctionTableSubqueryArgumentExpression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataTypes;

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
    // The arguments' texts are put in after parsing, as literals: no SQL escaping to get right
    // under each parser setting (spark.sql.parser.escapedStringLiterals reads a backslash as
    // itself); the parser sees placeholders with nothing to escape.
    List<String> arguments =
        List.of(String.join(",", keyColumns), how, matchedColumn, mode, conditions, facts);
    StringBuilder sql = new StringBuilder("SELECT * FROM ");
    sql.append(quoted(function)).append("(TABLE(").append(quoted(Names.PREFIX + "rows")).append(")");
    for (int i = 0; i < arguments.size(); i++) {
      sql.append(", '").append(placeholder(i)).append("'");
    }
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
    boolean[] filled = new boolean[arguments.size()];
    LogicalPlan withInput =
            call.transformExpressions(
                Scala.everywhere(
                    e -> {
                      if (e instanceof FunctionTableSubqueryArgumentExpression && !placed[0]) {
                        placed[0] = true;
                        return ((FunctionTableSubqueryArgumentExpression) e).withNewPlan(input);
                      }
                      if (e instanceof Literal && ((Literal) e).value() != null) {
                        String text = ((Literal) e).value().toString();
                        for (int i = 0; i < arguments.size(); i++) {
                          if (text.equals(placeholder(i))) {
                            filled[i] = true;
                            return Literal.create(arguments.get(i), DataTypes.StringType);
                          }
                        }
                      }
                      return e;
                    }));
    if (!placed[0]) {
      throw new NotRewritten("this Spark parses TABLE(...) otherwise");
    }
    for (boolean argument : filled) {
      if (!argument) {
        throw new NotRewritten("this Spark parses a table function's arguments otherwise");
      }
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

  private static String placeholder(int i) {
    return Names.PREFIX + "argument_" + i;
  }
}
