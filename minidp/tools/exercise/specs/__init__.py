"""One module per exercise (``NAME.py``, its ``EXERCISE``): the catalogue imports only the one
checked. What several share: ``comm.py`` (collectives), ``ddp.py`` (torch DDP), ``dp.py``."""
