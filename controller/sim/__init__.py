"""The scheduling simulator (``gflowctl simulate``): the controller's policy on a virtual clock."""
