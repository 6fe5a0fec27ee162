"""Planned against billed: FOCUS billing exports read (``focus``, ``reader``, ``charges``), stored
(``gpuprov.store.billing``) and reconciled with the plans a fleet followed (``timeline``,
``reconcile``, ``report``)."""
