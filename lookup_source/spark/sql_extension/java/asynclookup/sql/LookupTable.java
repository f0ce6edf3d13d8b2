package asynclookup.sql;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An asynclookup relation (a {@code DataSourceV2Relation} over the Python data source named
 * {@code asynclookup}) as the rewrite sees it: its key columns and the table function a
 * registered table was given, from the relation's options and schema. Its {@code strategy} is
 * judged by the table function's {@code analyze} ({@link RuleFacts}), which also checks that
 * these key columns are the data source's.
 */
final class LookupTable {
  /** The data source's name, as {@code spark.read.format(...)} takes it. */
  static final String SOURCE = Contract.SOURCE;

  /** Set by register_lookup_table on its view: the table function that looks this table up. */
  static final String FUNCTION_OPTION = Contract.OPTION_JOIN_FUNCTION;

  /** Marks a key column in a schema the store inferred (no key.column given). */
  static final String KEY_METADATA = Contract.KEY_METADATA;

  final DataSourceV2Relation relation;
  final List<Attribute> keys;
  final List<Attribute> values;
  /** register_lookup_table's function, or null (the rewrite then makes one from the options). */
  final String function;

  private LookupTable(
      DataSourceV2Relation relation,
      List<Attribute> keys,
      List<Attribute> values,
      String function) {
    this.relation = relation;
    this.keys = keys;
    this.values = values;
    this.function = function;
  }

  static boolean isLookupRelation(Object plan) {
    if (!(plan instanceof DataSourceV2Relation)) {
      return false;
    }
    Table table = ((DataSourceV2Relation) plan).table();
    return table.getClass().getName().endsWith(".PythonTable")
        && SOURCE.equalsIgnoreCase(table.name());
  }

  /** The table behind {@code relation}; throws {@link NotRewritten} when it cannot be one. */
  static LookupTable of(DataSourceV2Relation relation) {
    CaseInsensitiveStringMap options = relation.options();
    if (options.containsKey(Contract.OPTION_KEYS)) {
      throw new NotRewritten(
          "the lookup table reads only the keys of its keys option: a JOIN sees those rows only");
    }
    List<Attribute> output = Scala.list(relation.output());
    List<Attribute> keys = new ArrayList<>();
    String keyColumn = options.get(Contract.OPTION_KEY_COLUMN);
    if (keyColumn != null && !keyColumn.trim().isEmpty()) {
      for (String name : keyColumn.split(",")) {
        keys.add(column(output, name.trim()));
      }
    } else {
      for (Attribute a : output) {
        if (a.metadata().contains(KEY_METADATA)) {
          keys.add(a);
        }
      }
      if (keys.isEmpty()) {
        keys.add(output.get(0)); // as the data source does: the schema's first column
      }
    }
    List<Attribute> values = new ArrayList<>();
    for (Attribute a : output) {
      if (Contract.ERROR_COLUMN.equalsIgnoreCase(a.name())) {
        throw new NotRewritten(
            "the lookup table has an error column (on.error=column): a JOIN against it keeps"
                + " Spark's scan");
      }
      if (a.name().toLowerCase(Locale.ROOT).startsWith(Names.PREFIX)) {
        throw new NotRewritten("column " + a.name() + " uses the prefix the rewrite reserves");
      }
      if (!keys.contains(a)) {
        values.add(a);
      }
    }
    if (values.isEmpty()) {
      throw new NotRewritten("the lookup table has no value columns");
    }
    for (Attribute key : keys) {
      String unfit = Casts.unfitKey(key.dataType());
      if (unfit != null) {
        throw new NotRewritten(unfit);
      }
    }
    String function = options.get(FUNCTION_OPTION);
    return new LookupTable(
        relation,
        keys,
        values,
        function == null || function.trim().isEmpty() ? null : function.trim());
  }

  private static Attribute column(List<Attribute> output, String name) {
    for (Attribute a : output) { // as the data source finds it: the exact name first
      if (a.name().equals(name)) {
        return a;
      }
    }
    for (Attribute a : output) {
      if (a.name().equalsIgnoreCase(name)) {
        return a;
      }
    }
    throw new NotRewritten("key.column names " + name + ", which the table does not have");
  }

  /** Whether {@code plan} reads this same table (the same options and schema) anywhere (a
   * {@code LIMIT 0} reads nothing: {@link CacheLink}). */
  boolean readBy(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan) {
    if (CacheLink.readsNothing(plan)) {
      return false;
    }
    if (isLookupRelation(plan)) {
      DataSourceV2Relation other = (DataSourceV2Relation) plan;
      if (other.options().equals(relation.options()) && other.schema().equals(relation.schema())) {
        return true;
      }
    }
    for (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan child :
        Scala.list(plan.children())) {
      if (readBy(child)) {
        return true;
      }
    }
    return false;
  }

  /** The options as given to the data source, for the table function made from them. */
  Map<String, String> options() {
    return relation.options().asCaseSensitiveMap();
  }

  int keyIndex(Attribute a) {
    for (int i = 0; i < keys.size(); i++) {
      if (keys.get(i).exprId().equals(a.exprId())) {
        return i;
      }
    }
    return -1;
  }

  boolean isValue(Attribute a) {
    for (Attribute v : values) {
      if (v.exprId().equals(a.exprId())) {
        return true;
      }
    }
    return false;
  }

  List<String> keyNames() {
    List<String> names = new ArrayList<>();
    for (Attribute a : keys) {
      names.add(a.name());
    }
    return names;
  }
}
