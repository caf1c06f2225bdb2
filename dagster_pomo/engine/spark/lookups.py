"""JVM classes and static methods looked up once per process, not once per use.

Every PySpark column function (``F.col``, ``F.lit``, ``F.max``...) first asks the JVM,
over the Py4J socket, what ``org.apache.spark.sql.functions`` is and then what its member
is, and only then calls it: three round trips where one does. The engine builds thousands
of columns an epoch, so more than a quarter of its calls into the JVM were these
questions, asked again with the same answer. :func:`remember_lookups` gives the Spark
context a view of the JVM that keeps the classes it found and their static methods
(never the values of static fields, which may change), and otherwise behaves as before,
for the engine and for any other code of the process alike.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JVMView


class _RememberedClass(JavaClass):
    """A Java class whose static methods and nested classes are looked up once."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if isinstance(found, JavaClass):
            found = _RememberedClass(found._fqn, found._gateway_client)
        if isinstance(found, JavaClass | JavaMember):  # a method holds no state of a call
            self.__dict__[name] = found  # later look-ups find it without asking the JVM
        return found


class _RememberingView(JVMView):
    """The same JVM view (same id, so the same imports), remembering the classes found."""

    def __init__(self, view: JVMView) -> None:
        super().__init__(view._gateway_client, view._jvm_name, id=view._id)

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if isinstance(found, JavaClass):
            found = _RememberedClass(found._fqn, found._gateway_client)
            self.__dict__[name] = found
        return found


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client, which has no ``sparkContext``."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def remember_lookups(spark: Any) -> None:
    """Make the JVM view of ``spark``'s context remember its look-ups (once per context; a
    Spark Connect session has no JVM here and is left as it is), and ``spark`` use that
    view: a session keeps the view it was made with, through which PySpark looks up the
    classes that take a table of rows to the JVM (each such class found by trying every
    package PySpark imports, a search of every jar for each miss)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if is_connect(spark):
        return

    view = SparkContext._jvm
    if view is None:
        return
    if not isinstance(view, _RememberingView):
        view = SparkContext._jvm = _RememberingView(view)
    if isinstance(spark, SparkSession):  # not a session yet to start (`LazySession`)
        spark._jvm = view
