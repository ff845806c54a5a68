"""What the protocols write besides their JSON and CSV: PNG grids of maps (``map_grid``), W&B runs (``wandb_log``)."""
