"""memtap's version (a leaf: telemetry and the plugin listing read it without importing the
package facade)."""

__version__ = "0.1.0"
