"""beam-expmech: differentially private selection and synthesis with the exponential mechanism on Apache Beam."""

__version__ = "0.1.0"
