package asynclookup.sql;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Add;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Divide;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.EvalMode$;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.NumericEvalContext;
import org.apache.spark.sql.catalyst.expressions.Remainder;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import scala.Option;

/**
 * Unit tests of the rule's parts that need no session: what never raises ({@link RaiseFree}),
 * which casts keep equality ({@link Casts}), the pair conditions' JSON ({@link PairConditions}),
 * the table function's pickled command ({@link TableFunctions}), what the rule tells the table
 * function ({@link RuleFacts}), the branch that keeps a rewrite linked to its table in Spark's
 * cache ({@link CacheLink}), and which Spark versions take the extension. A plain runner (no JUnit on this machine): {@code main} prints each failure and
 * exits with 1 if there was one; run by tests/unit/test_java_rule_parts.py.
 */
public final class RulePartsTest {
  private static final List<String> FAILED = new ArrayList<>();
  private static int passed;

  public static void main(String[] args) {
    raiseFree();
    casts();
    pairConditions();
    pickledCommand();
    versions();
    ruleFacts();
    cacheLink();
    System.out.println(passed + " passed, " + FAILED.size() + " failed");
    for (String failure : FAILED) {
      System.out.println("FAILED " + failure);
    }
    System.exit(FAILED.isEmpty() ? 0 : 1);
  }

  private static void check(String what, boolean holds) {
    if (holds) {
      passed++;
    } else {
      FAILED.add(what);
    }
  }

  private static AttributeReference column(String name, DataType type) {
    return Expressions.reference(name, type, true, NamedExpression.newExprId());
  }

  private static Literal literal(Object value, DataType type) {
    return Literal.create(value, type);
  }

  static void raiseFree() {
    AttributeReference i = column("i", DataTypes.IntegerType);
    AttributeReference s = column("s", DataTypes.StringType);
    NumericEvalContext ansi = NumericEvalContext.apply(EvalMode$.MODULE$.ANSI(), true);
    NumericEvalContext legacy = NumericEvalContext.apply(EvalMode$.MODULE$.LEGACY(), true);
    Expression ansiAdd = new Add(i, literal(1, DataTypes.IntegerType), ansi);
    Expression legacyAdd = new Add(i, literal(1, DataTypes.IntegerType), legacy);
    check("an ANSI integer sum may overflow", !RaiseFree.neverRaises(ansiAdd));
    check("a legacy integer sum wraps", RaiseFree.neverRaises(legacyAdd));
    Expression byTwo =
        new Remainder(i, literal(2, DataTypes.IntegerType), ansi);
    Expression byColumn = new Remainder(i, i, ansi);
    check("% by a literal that is not zero", RaiseFree.neverRaises(byTwo));
    check("% by a column may divide by zero", !RaiseFree.neverRaises(byColumn));
    Expression doubleDivide =
        new Divide(
            column("d", DataTypes.DoubleType), literal(0.0, DataTypes.DoubleType), ansi);
    check("a division by the literal zero raises in ANSI", !RaiseFree.neverRaises(doubleDivide));
    Expression tryCast = new Cast(s, DataTypes.IntegerType, Option.empty(), EvalMode$.MODULE$.TRY());
    Expression ansiCast =
        new Cast(s, DataTypes.IntegerType, Option.empty(), EvalMode$.MODULE$.ANSI());
    Expression widen =
        new Cast(i, DataTypes.LongType, Option.empty(), EvalMode$.MODULE$.ANSI());
    Expression constant =
        new Cast(
            literal(org.apache.spark.unsafe.types.UTF8String.fromString("12"), DataTypes.StringType),
            DataTypes.IntegerType, Option.empty(), EvalMode$.MODULE$.ANSI());
    check("a TRY cast", RaiseFree.neverRaises(tryCast));
    check("an ANSI cast of a string to a number", !RaiseFree.neverRaises(ansiCast));
    check("a widening cast", RaiseFree.neverRaises(widen));
    check("a cast of a constant that succeeds", RaiseFree.neverRaises(constant));
    check(
        "comparisons and boolean logic",
        RaiseFree.neverRaises(
            new And(new EqualTo(i, literal(3, DataTypes.IntegerType)), new Not(new EqualTo(s, s)))));
  }

  static void casts() {
    check("int into long", Casts.oneToOne(DataTypes.IntegerType, DataTypes.LongType));
    check("long into int: not", !Casts.oneToOne(DataTypes.LongType, DataTypes.IntegerType));
    check("long into decimal(20,0)", Casts.oneToOne(DataTypes.LongType, new DecimalType(20, 0)));
    check("long into decimal(18,0): not", !Casts.oneToOne(DataTypes.LongType, new DecimalType(18, 0)));
    check("int into double", Casts.oneToOne(DataTypes.IntegerType, DataTypes.DoubleType));
    check("long into double: not", !Casts.oneToOne(DataTypes.LongType, DataTypes.DoubleType));
    check("a string key is fit", Casts.unfitKey(DataTypes.StringType) == null);
    check("a double key is unfit", Casts.unfitKey(DataTypes.DoubleType) != null);
  }

  static void pairConditions() {
    AttributeReference ts = column("ts", DataTypes.IntegerType);
    AttributeReference from = column("valid_from", DataTypes.IntegerType);
    Map<ExprId, String> inputs = new HashMap<>();
    inputs.put(ts.exprId(), "__asynclookup_c2");
    List<Expression> conditions = new ArrayList<>();
    conditions.add(new GreaterThanOrEqual(ts, from));
    conditions.add(new Not(new EqualTo(from, literal(7, DataTypes.IntegerType))));
    conditions.add(new LessThan(from, literal(
        org.apache.spark.unsafe.types.UTF8String.fromString("a\"b"), DataTypes.StringType)));
    String json = PairConditions.json(conditions, inputs);
    String expected =
        "[{\"op\":\"ge\",\"left\":{\"input\":\"__asynclookup_c2\"},\"right\":{\"value\":"
            + "\"valid_from\"}},{\"op\":\"ne\",\"left\":{\"value\":\"valid_from\"},\"right\":"
            + "{\"literal\":7}},{\"op\":\"lt\",\"left\":{\"value\":\"valid_from\"},\"right\":"
            + "{\"literal\":\"a\\\"b\"}}]";
    check("the pair conditions' JSON: " + json, expected.equals(json));
  }

  static void pickledCommand() {
    byte[] command = TableFunctions.command("{}", "{\"type\":\"struct\"}", "4");
    check("a pickle of protocol 2", command[0] == (byte) 0x80 && command[1] == 2);
    check("that ends with STOP", command[command.length - 1] == '.');
    String text = new String(command, java.nio.charset.StandardCharsets.ISO_8859_1);
    check(
        "that names the factory",
        text.contains(Contract.FACTORY_MODULE + "\n" + Contract.FACTORY + "\n"));
    check("options in JSON, sorted", TableFunctions.json(Map.of("b", "2", "a", "\"1\"")).equals(
        "{\"a\":\"\\\"1\\\"\",\"b\":\"2\"}"));
  }

  /** What the rule tells the table function; also printed ("FACTS <json>") for the Python
   * side of the test to parse as the table function does. */
  static void ruleFacts() {
    String known = RuleFacts.json(1234567, List.of("k", "Odd \"name\"\\"), "r1");
    check(
        "the facts' JSON: " + known,
        known.equals("{\"rewrite\":\"r1\",\"input_rows\":1234567,\"table_keys\":[\"k\",\"Odd \\\"name\\\"\\\\\"]}"));
    String unknown = RuleFacts.json(-1, List.of("a", "b"), "r2");
    check("an unknown size is left out: " + unknown, unknown.equals("{\"rewrite\":\"r2\",\"table_keys\":[\"a\",\"b\"]}"));
    System.out.println("FACTS " + known);
    System.out.println("FACTS " + unknown);
  }

  static void versions() {
    check("4.1 takes it", AsyncLookupSqlExtensions.supported("4.1.0"));
    check("4.3.0-SNAPSHOT takes it", AsyncLookupSqlExtensions.supported("4.3.0-SNAPSHOT"));
    check("5.0 takes it", AsyncLookupSqlExtensions.supported("5.0.0"));
    check("4.0 does not", !AsyncLookupSqlExtensions.supported("4.0.1"));
    check("nonsense does not", !AsyncLookupSqlExtensions.supported("x.y"));
  }

  private static void cacheLink() {
    AttributeReference id = Expressions.reference("id", DataTypes.LongType, false, NamedExpression.newExprId());
    AttributeReference name = column("name", DataTypes.StringType);
    AttributeReference tags = column("tags", DataTypes.createArrayType(DataTypes.StringType));
    LogicalPlan lookups = LocalRelation$.MODULE$.apply(Scala.<Attribute>seq(id, name, tags));
    LogicalPlan table = LocalRelation$.MODULE$.apply(Scala.<Attribute>seq(column("k", DataTypes.LongType)));
    LogicalPlan linked = CacheLink.linked(lookups, table);
    check("a link is a union of the lookups and a branch", linked instanceof Union);
    List<Attribute> out = Scala.list(linked.output());
    check("its columns are the lookups' (ids, names, types)", out.equals(Scala.list(lookups.output())));
    check("as nullable as the lookups'", !out.get(0).nullable() && out.get(1).nullable());
    LogicalPlan branch = Scala.list(linked.children()).get(1);
    LogicalPlan limit = Scala.list(branch.children()).get(0);
    check("the branch reads nothing", CacheLink.readsNothing(limit));
    check("and holds the table", Scala.list(limit.children()).get(0) == table);
    check("a LIMIT 1 reads", !CacheLink.readsNothing(new LocalLimit(literal(1, DataTypes.IntegerType), table)));
    check("a plan is found in the link", linked.exists(Scala.fn(p -> p.sameResult(table))));
  }
}
