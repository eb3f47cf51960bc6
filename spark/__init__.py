"""Spark on Magnetar: the data source that reads topics (``spark.source``) and the session helper.

``spark.session.session()`` starts a SparkSession whose Python workers run this interpreter and registers
the ``magnetar`` format; ``magnetar.spark.register(spark)`` registers it on a session made elsewhere.
"""
