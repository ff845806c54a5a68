"""What an evaluator is given: its config (``config``), a ``train.py`` run (``runs``), a population
(``sources``, ``image_members``), and the check that maps, inputs and outputs are finite (``finite``)."""
