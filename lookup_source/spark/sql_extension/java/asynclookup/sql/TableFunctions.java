package asynclookup.sql;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.util.Map;
import java.util.TreeMap;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.execution.python.UserDefinedPythonTableFunction;
import scala.Option;

/**
 * The table function that looks a lookup table up. A table of {@code register_lookup_table} names
 * its own (option {@code sql.join.function}). Any other asynclookup relation — {@code CREATE
 * TEMPORARY VIEW ... USING asynclookup}, a {@code spark.read.format("asynclookup")} DataFrame —
 * gets one made from its options and schema and registered in the session, once: a Python table
 * function ({@code lookup_source.spark.sql_functions.join_function}) that runs with the Python
 * the data source itself was registered with, its rate and budget shares split over the
 * session's default parallelism.
 *
 * <p>The options (secrets included) travel inside the function's pickled command, never in a
 * plan's text; the function's name carries a digest of them keyed by a secret of this JVM.
 */
final class TableFunctions {
  private TableFunctions() {}

  static final String FACTORY_MODULE = Contract.FACTORY_MODULE;
  static final String FACTORY = Contract.FACTORY;
  /** PythonEvalType.SQL_ARROW_UDTF: the table function receives and yields Arrow batches. */
  static final int ARROW_UDTF = Contract.ARROW_UDTF;

  private static final byte[] KEY = new byte[32];

  static {
    new SecureRandom().nextBytes(KEY);
  }

  static String functionFor(SparkSession session, LookupTable table) {
    if (table.function != null) {
      if (exists(session, table.function)) {
        return table.function;
      }
      if (Contract.FUNCTION_CONNECTOR.equalsIgnoreCase(table.options().getOrDefault(Contract.OPTION_CONNECTOR, ""))) {
        throw new NotRewritten(
            "the table function " + table.function + " of this lookup table is not registered"
                + " in this session");
      }
    }
    if (Contract.FUNCTION_CONNECTOR.equalsIgnoreCase(
        table.relation.options().getOrDefault(Contract.OPTION_CONNECTOR, ""))) {
      throw new NotRewritten("a lookup through your own function needs register_lookup_table");
    }
    String options = json(table.options());
    String schema = table.relation.schema().json();
    // what rate.limit.total and a budget are split over: every core, as for a registered table
    String tasks = String.valueOf(session.sparkContext().defaultParallelism());
    String name = "asynclookup_join_" + digest(options + "\n" + schema + "\n" + tasks);
    if (!exists(session, name)) {
      UserDefinedPythonDataSource source =
          session.sessionState().dataSourceManager().lookupDataSource(LookupTable.SOURCE);
      PythonFunction function = source.createPythonFunction(command(options, schema, tasks));
      session
          .udtf()
          .registerPython(
              name,
              new UserDefinedPythonTableFunction(name, function, Option.empty(), ARROW_UDTF, true));
    }
    return name;
  }

  static boolean exists(SparkSession session, String name) {
    Views.admit(name); // (in a view's text: a function the text never named)
    // as the analyzer looks a table function up (Spark 4.2+ asserts a qualified name elsewhere)
    return session.sessionState().catalog().lookupBuiltinOrTempTableFunction(name).isDefined();
  }

  /**
   * A pickle (protocol 2) of the call {@code join_function(options, schema, tasks)}: the Python
   * worker unpickles a table function's command into its handler class, which this call returns.
   */
  static byte[] command(String options, String schema, String tasks) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(0x80);
    out.write(2);
    out.write('c');
    write(out, (FACTORY_MODULE + "\n" + FACTORY + "\n").getBytes(StandardCharsets.UTF_8));
    unicode(out, options);
    unicode(out, schema);
    unicode(out, tasks);
    out.write(0x87); // TUPLE3
    out.write('R'); // REDUCE
    out.write('.'); // STOP
    return out.toByteArray();
  }

  private static void unicode(ByteArrayOutputStream out, String text) {
    byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
    out.write('X'); // BINUNICODE: a 4-byte little-endian length, then UTF-8
    out.write(bytes.length & 0xff);
    out.write((bytes.length >>> 8) & 0xff);
    out.write((bytes.length >>> 16) & 0xff);
    out.write((bytes.length >>> 24) & 0xff);
    write(out, bytes);
  }

  private static void write(ByteArrayOutputStream out, byte[] bytes) {
    out.write(bytes, 0, bytes.length);
  }

  static String json(Map<String, String> options) {
    StringBuilder out = new StringBuilder("{");
    boolean first = true;
    for (Map.Entry<String, String> e : new TreeMap<>(options).entrySet()) {
      out.append(first ? "" : ",").append(jsonString(e.getKey())).append(':');
      out.append(jsonString(e.getValue()));
      first = false;
    }
    return out.append('}').toString();
  }

  static String jsonString(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }

  private static String digest(String text) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(KEY, "HmacSHA256"));
      byte[] sum = mac.doFinal(text.getBytes(StandardCharsets.UTF_8));
      StringBuilder hex = new StringBuilder();
      for (int i = 0; i < 8; i++) {
        hex.append(String.format("%02x", sum[i]));
      }
      return hex.toString();
    } catch (GeneralSecurityException error) {
      throw new NotRewritten("no HmacSHA256 in this JVM: " + error);
    }
  }
}
