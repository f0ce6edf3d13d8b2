package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.PythonUDTF;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * An optimizer rule: the conditions of a filter above a rewritten lookup that read only the
 * lookup's input columns ({@code WHERE e.event_id > 3} over {@code events e JOIN users u}) are
 * evaluated on the input instead, before its rows are looked up. Spark's optimizer moves such a
 * filter down to the lookup, but not through a table function: without this rule, the rows the
 * filter drops would still be looked up.
 *
 * <p>It applies to lookups the rewrite made (their input columns are named {@code
 * __asynclookup_c<i>}, the table function passes each input row's columns through unchanged):
 * {@code Filter(cond, Generate(lookup(struct), Project(struct AS c, child)))}, the shape of a
 * table function call once Spark has decorrelated it.
 */
public final class FilterLookupInput extends Rule<LogicalPlan> {
  @Override
  public String ruleName() {
    return "asynclookup.FilterLookupInput";
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!Settings.joinsEnabled()) {
      return plan;
    }
    return plan.transformUp(
        Scala.everywhere(
            p -> {
              if (p instanceof Filter && ((Filter) p).child() instanceof Generate) {
                try {
                  return push((Filter) p);
                } catch (RuntimeException | LinkageError | AssertionError error) { // as it was
                  AsyncLookupSqlExtensions.LOG.debug(
                      "asynclookup: a filter above a lookup stays there: {}", error.toString());
                }
              }
              return p;
            }));
  }

  private static LogicalPlan push(Filter filter) {
    Generate generate = (Generate) filter.child();
    if (!(generate.generator() instanceof PythonUDTF)
        || !(generate.child() instanceof Project)) {
      return filter;
    }
    List<Expression> arguments = Scala.list(((PythonUDTF) generate.generator()).children());
    if (arguments.isEmpty() || !(arguments.get(0) instanceof AttributeReference)) {
      return filter;
    }
    ExprId table = ((AttributeReference) arguments.get(0)).exprId();
    Project project = (Project) generate.child();
    CreateNamedStruct struct = null;
    for (NamedExpression e : Scala.list(project.projectList())) {
      if (e instanceof Alias
          && e.exprId().equals(table)
          && ((Alias) e).child() instanceof CreateNamedStruct) {
        struct = (CreateNamedStruct) ((Alias) e).child();
      }
    }
    if (struct == null) {
      return filter;
    }
    Map<String, Expression> fields = new HashMap<>();
    List<Object> names = Scala.list(struct.names());
    List<Expression> values = Scala.list(struct.valExprs());
    for (int i = 0; i < names.size(); i++) {
      fields.put(String.valueOf(names.get(i)), values.get(i));
    }
    // the lookup's output columns that are its input's, passed through: by their field
    Map<ExprId, Expression> inputs = new HashMap<>();
    List<Attribute> passed = new ArrayList<>();
    for (Attribute a : Scala.list(generate.generatorOutput())) {
      String name = a.name();
      if (name.startsWith(Names.PREFIX + "c") && fields.containsKey(name)) {
        inputs.put(a.exprId(), fields.get(name));
        passed.add(a);
      }
    }
    if (inputs.isEmpty()) {
      return filter;
    }
    List<Expression> passedExpressions = new ArrayList<>(passed);
    AttributeSet passedSet = AttributeSet.apply(Scala.seq(passedExpressions));
    List<Expression> below = new ArrayList<>();
    List<Expression> above = new ArrayList<>();
    for (Expression c : Expressions.conjuncts(filter.condition())) {
      if (Expressions.referencesOnly(c, passedSet) && Expressions.movable(c)) {
        below.add(Expressions.substitute(c, inputs));
      } else {
        above.add(c);
      }
    }
    if (below.isEmpty()) {
      return filter;
    }
    LogicalPlan filtered =
        project.withNewChildren(
            Scala.seq(new Filter(Expressions.and(below), project.child())));
    LogicalPlan lookup = generate.withNewChildren(Scala.seq(filtered));
    return above.isEmpty() ? lookup : new Filter(Expressions.and(above), lookup);
  }
}
