"""Run history: the SQLite store of kept runs (`store`) and how two runs compare (`compare`)."""
