"""Sizing: a model's memory per GPU (``memory``), its dimensions (``model``), the throughput
table (``throughput``) and work-unit demand turned into what one replica of a GPU type does
(``work``). Pure arithmetic and bundled data; no store, no clouds, no solver."""
