package asynclookup.sql;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
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
 * A join's condition and its lookup side's filters, sorted: the input expression that gives
 * each key column its value, conditions on the input alone, and conditions that read the
 * table's values.
 *
 * <p>A key column may be compared through casts that widen it exactly ({@code e.amount_dec =
 * u.id}: the id cast to a decimal, maybe in two steps): the input's value is then narrowed back
 * to the key's type by TRY casts, and a value that is not exactly a key asks for nothing (it
 * could match no row in Spark's join either).
 *
 * <p>A filter of the lookup side that reads only its key columns becomes a condition on the
 * input (the key's value is the input's); it never raises ({@link LookupSide} checks).
 */
final class Conditions {
  final Expression[] keys;
  /** Conditions on the input alone (the ON condition's, and the side's filters on keys). */
  final List<Expression> onInput = new ArrayList<>();
  /** Conditions that read the table's values (the ON condition's, and the side's filters),
   * but for those in {@link #onPairs}. */
  final List<Expression> onValues = new ArrayList<>();
  /** Comparisons of a table's value column with an input column or a literal, which the table
   * function judges on each pair of a row and a match ({@link PairConditions}). */
  final List<Expression> onPairs = new ArrayList<>();

  private Conditions(int keys) {
    this.keys = new Expression[keys];
  }

  /** Whether every condition on the input can never raise (see {@link RaiseFree}). */
  boolean inputNeverRaises() {
    for (Expression c : onInput) {
      if (!RaiseFree.neverRaises(c)) {
        return false;
      }
    }
    return true;
  }

  static Conditions of(Expression on, LookupSide side, AttributeSet inputSet) {
    LookupTable table = side.table;
    Conditions result = new Conditions(table.keys.size());
    List<Expression> rest = new ArrayList<>();
    for (Expression conjunct : Expressions.conjuncts(on)) {
      Expression c = Expressions.substitute(conjunct, side.outputs);
      if (!c.references().isEmpty() && !Expressions.referencesAny(c, inputSet)
          && !RaiseFree.neverRaises(c)) { // Spark evaluates it on every row it scans
        throw new NotRewritten(
            "a condition on the table alone may raise an error on a row the lookups never"
                + " fetch (Spark evaluates it on every row it scans): "
                + c.sql());
      }
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
          "the condition does not equate every key column of the table ("
              + String.join(", ", table.keyNames())
              + ") with the other side: missing "
              + String.join(", ", unbound));
    }
    rest.addAll(side.filters);
    for (Expression c : rest) {
      for (Attribute a : Scala.list(c.references().toSeq())) {
        if (!inputSet.contains(a) && table.keyIndex(a) < 0 && !table.isValue(a)) {
          throw new NotRewritten(
              "a condition reads " + a.name() + ", of neither the input nor the table");
        }
      }
      Expression onKeys = Expressions.substitute(c, keyValues);
      if (onKeys.references().subsetOf(inputSet)) {
        requireInputOnly(onKeys);
        result.onInput.add(onKeys);
      } else {
        if (!Expressions.movable(c)) {
          throw new NotRewritten("a condition cannot move above the lookup: " + c.sql());
        }
        (PairConditions.takes(c, table, inputSet) ? result.onPairs : result.onValues).add(c);
      }
    }
    result.raiseWhereSparkWould(inputSet);
    return result;
  }

  /**
   * Throws {@link NotRewritten} when a condition on the table's values may raise an error on
   * other rows than Spark's join evaluates it on. An equality of the two sides is one of Spark's
   * join keys, evaluated on every row of each side, where the rewrite evaluates it on the pairs
   * whose keys matched; the other conditions Spark evaluates on the pairs whose join keys all
   * matched, as the rewrite does when the table's keys are the only ones.
   */
  private void raiseWhereSparkWould(AttributeSet inputSet) {
    List<Expression> onTable = new ArrayList<>(onValues);
    onTable.addAll(onPairs);
    boolean moreJoinKeys = false;
    for (Expression c : onTable) {
      if ((c instanceof EqualTo || c instanceof EqualNullSafe)
          && Expressions.referencesAny(c, inputSet)) {
        moreJoinKeys = true;
        if (!RaiseFree.neverRaises(c)) {
          throw new NotRewritten(
              "an equality of the input and the table's values may raise an error (Spark"
                  + " evaluates each side of it on every row, as a join key): "
                  + c.sql());
        }
      }
    }
    for (Expression c : onTable) {
      if (moreJoinKeys && !RaiseFree.neverRaises(c)) {
        throw new NotRewritten(
            "a condition on the table's values may raise an error, which Spark evaluates only"
                + " on the pairs its other join keys match: "
                + c.sql());
      }
    }
  }

  /** {@code inputSide = tableSide}: a key column of the table equated with the input. */
  private boolean bind(
      Expression inputSide, Expression tableSide, LookupTable table, AttributeSet inputSet) {
    if (!Expressions.referencesOnly(inputSide, inputSet)) {
      return false;
    }
    List<Cast> casts = new ArrayList<>(); // from the outermost in
    Expression key = tableSide;
    while (key instanceof Cast) {
      casts.add((Cast) key);
      key = ((Cast) key).child();
    }
    if (!(key instanceof AttributeReference)) {
      return false;
    }
    int k = table.keyIndex((Attribute) key);
    if (k < 0 || keys[k] != null) {
      return false;
    }
    DataType keyType = key.dataType();
    if (casts.isEmpty()) {
      if (!inputSide.dataType().sameType(keyType)) {
        return false;
      }
      requireInputOnly(inputSide);
      keys[k] = inputSide;
      return true;
    }
    Collections.reverse(casts); // from the innermost out
    for (Cast cast : casts) {
      if (!Casts.oneToOne(cast.child().dataType(), cast.dataType())) {
        return false;
      }
    }
    requireInputOnly(inputSide);
    // the input's value as the key's type, when it is exactly one: else no key, no match
    Expression narrowed = tryCast(inputSide, keyType);
    Expression back = narrowed;
    for (Cast cast : casts) {
      back = tryCast(back, cast.dataType());
    }
    keys[k] = new If(new EqualTo(back, inputSide), narrowed, Literal.create(null, keyType));
    return true;
  }

  private static Expression tryCast(Expression e, DataType type) {
    return new Cast(e, type, Option.empty(), EvalMode$.MODULE$.TRY());
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
