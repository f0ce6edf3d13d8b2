package asynclookup.sql;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import scala.PartialFunction;
import scala.PartialFunction$;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction0;
import scala.runtime.AbstractFunction1;

/** Scala collections and functions from Java: the few conversions the extension needs. */
final class Scala {
  private Scala() {}

  @SafeVarargs
  static <T> Seq<T> seq(final T... items) {
    List<T> list = new ArrayList<>();
    for (T item : items) {
      list.add(item);
    }
    return seq(list);
  }

  static <T> Seq<T> seq(List<T> items) {
    return CollectionConverters.asScala(new ArrayList<>(items)).toList();
  }

  static <T> List<T> list(scala.collection.Iterable<? extends T> items) {
    return new ArrayList<T>(CollectionConverters.asJavaCollection(items));
  }

  static <A, B> scala.Function1<A, B> fn(Function<A, B> function) {
    return new AbstractFunction1<A, B>() {
      @Override
      public B apply(A value) {
        return function.apply(value);
      }
    };
  }

  static <A> scala.Function0<A> thunk(java.util.function.Supplier<A> supplier) {
    return new AbstractFunction0<A>() {
      @Override
      public A apply() {
        return supplier.get();
      }
    };
  }

  /** A partial function defined everywhere (a rule returns what it does not change). */
  static <A, B> PartialFunction<A, B> everywhere(Function<A, B> function) {
    return PartialFunction$.MODULE$.fromFunction(fn(function));
  }
}
