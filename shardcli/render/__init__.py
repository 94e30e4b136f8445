"""The one render layer: rich renderables for people, JSON documents for scripts.

Imports from: plan, playground, training, program, analysis, runtime, hardware, results, specs, errors,
tile_math.
"""
