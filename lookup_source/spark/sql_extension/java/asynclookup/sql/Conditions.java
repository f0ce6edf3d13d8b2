package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.EvalMode$;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.types.DataType;
import scala.Option;

/**
 * A join's ON condition and its lookup side's filters, sorted: the input expression that gives
 * each key column its value, conditions on the input alone, conditions on the table's values.
 *
 * <p>A condition that the rewrite evaluates on other rows than Spark's join would — the side's
 * filters on the key (Spark evaluates them on the table's rows, the rewrite on the input's
 * values), a LEFT JOIN's conditions on the input (Spark evaluates them on rows whose key
 * matched, the rewrite on every row) — must be one that never raises, or the join is left to
 * Spark.
 */
final class Conditions {
  final Expression[] keys;
  final List<Expression> onInput = new ArrayList<>();
  final List<Expression> onValues = new ArrayList<>();

  private Conditions(int keys) {
    this.keys = new Expression[keys];
  }

  static Conditions of(Expression on, LookupSide side, AttributeSet inputSet, boolean leftOuter) {
    LookupTable table = side.table;
    Conditions result = new Conditions(table.keys.size());
    List<Expression> rest = new ArrayList<>();
    for (Expression conjunct : Expressions.conjuncts(on)) {
      Expression c = Expressions.substitute(conjunct, side.outputs);
      if (c instanceof EqualTo) {
        EqualTo eq = (EqualTo) c;
        if (result.bind(eq.left(), eq.right(), table, inputSet)
            || result.bind(eq.right(), eq.left(), table, inputSet)) {
          continue;
        }
      }
      rest.add(c);
    }
    List<String> unbound = new ArrayList<>();
    Map<ExprId, Expression> keyValues = new HashMap<>();
    for (int k = 0; k < result.keys.length; k++) {
      if (result.keys[k] == null) {
        unbound.add(table.keys.get(k).name());
      } else {
        keyValues.put(table.keys.get(k).exprId(), result.keys[k]);
      }
    }
    if (!unbound.isEmpty()) {
      throw new NotRewritten(
          "the ON condition does not equate every key column of the table ("
              + String.join(", ", table.keyNames())
              + ") with the other side: missing "
              + String.join(", ", unbound));
    }
    int fromOn = rest.size();
    rest.addAll(side.filters);
    for (int i = 0; i < rest.size(); i++) {
      Expression c = rest.get(i);
      Expression onKeys = Expressions.substitute(c, keyValues);
      if (onKeys.references().subsetOf(inputSet)) {
        requireInputOnly(onKeys);
        boolean moved = i >= fromOn || leftOuter; // evaluated on other rows than Spark's
        if (moved && !Expressions.neverRaises(onKeys)) {
          throw new NotRewritten(
              "a condition would be evaluated on rows Spark's join never gives it, and may"
                  + " raise an error there: "
                  + c.sql());
        }
        result.onInput.add(onKeys);
      } else {
        if (!Expressions.movable(c)) {
          throw new NotRewritten("a condition cannot move above the lookup: " + c.sql());
        }
        result.onValues.add(c);
      }
    }
    return result;
  }

  /** {@code inputSide = tableSide}: a key column of the table equated with the input. */
  private boolean bind(
      Expression inputSide, Expression tableSide, LookupTable table, AttributeSet inputSet) {
    if (!Expressions.referencesOnly(inputSide, inputSet)) {
      return false;
    }
    Expression key = tableSide;
    boolean cast = false;
    if (key instanceof Cast) { // the key column widened to the input's type
      key = ((Cast) key).child();
      cast = true;
    }
    if (!(key instanceof AttributeReference)) {
      return false;
    }
    int k = table.keyIndex((Attribute) key);
    if (k < 0 || keys[k] != null) {
      return false;
    }
    DataType keyType = key.dataType();
    if (!cast) {
      if (!inputSide.dataType().sameType(keyType)) {
        return false;
      }
      requireInputOnly(inputSide);
      keys[k] = inputSide;
      return true;
    }
    DataType wide = tableSide.dataType();
    if (!Casts.oneToOne(keyType, wide)) {
      return false;
    }
    requireInputOnly(inputSide);
    // the input's value as the key's type, when it is exactly one: else no key, no match
    Expression narrowed = new Cast(inputSide, keyType, Option.empty(), EvalMode$.MODULE$.TRY());
    Expression back = new Cast(narrowed, wide, Option.empty(), EvalMode$.MODULE$.TRY());
    keys[k] = new If(new EqualTo(back, inputSide), narrowed, Literal.create(null, keyType));
    return true;
  }

  private static void requireInputOnly(Expression e) {
    if (!e.deterministic()
        || e.find(Scala.fn(n -> (Object) (n instanceof SubqueryExpression))).isDefined()) {
      throw new NotRewritten(
          "a condition on the join's input is not deterministic or holds a subquery: "
              + e.sql());
    }
  }
}
