"""Many runs compared: the claims and the stability grid (``experiment``, ``claim``), their
training curves (``curves``), results tables (``report``) and their Markdown and plots
(``render*``, ``figures``). Not imported by ``--user-dir``."""
