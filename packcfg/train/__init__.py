"""The bundled executor: megatron-core GPTModel trained on packed (THD), in-batch packed or padded batches.

Heavy imports (torch, megatron-core) live in the modules below, never here, so `packcfg train --help`
stays cheap. Entry point: `packcfg.train.loop.train(config, options)`, which parses the config once into
`settings.TrainSettings` (every training setting is there); below it no module reads the config dict.
"""
