"""The operator's web console, served by the API process under ``/ui``.

Server-rendered (Jinja2) pages with a little vanilla JavaScript; every asset ships in this
package, so it works on a closed network. :func:`mount_ui` adds it to the API's app; the
offline ``/docs`` lives here too (:mod:`coordinator.ui.docs`).
"""

from coordinator.ui.mount import mount_ui
from coordinator.ui.settings import UiSettings

__all__ = ["UiSettings", "mount_ui"]
