"""The one render layer: rich renderables for people, JSON documents for scripts."""
