"""A model class's cells, checked in a job's forked child: ``cell`` ties the steps together; ``building`` (the tiny
model and eager outputs the cells share), ``engines`` (what exports), ``comparing`` (outputs against eager),
``second_shape``, ``generation`` (greedy tokens; ``export_module``: transformers' own exportable module) and
``failures`` (how a cell ends, and its record) are the steps."""
