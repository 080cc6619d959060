'use strict';

// Format a duration given in seconds, e.g. 3725 -> "1h 2m 5s".
function formatDuration(seconds) {
  const minutes = Math.floor(seconds / 60);
  const rest = seconds % 60;
  return `${minutes}m ${rest}s`;
}

module.exports = { formatDuration };
