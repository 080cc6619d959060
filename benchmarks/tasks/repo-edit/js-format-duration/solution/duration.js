'use strict';

// Format a duration given in seconds, e.g. 3725 -> "1h 2m 5s".
function formatDuration(seconds) {
  if (!Number.isInteger(seconds) || seconds < 0) {
    throw new RangeError(`not a whole number of seconds: ${seconds}`);
  }
  if (seconds === 0) {
    return '0s';
  }
  const parts = [];
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  const rest = seconds % 60;
  if (hours) parts.push(`${hours}h`);
  if (minutes) parts.push(`${minutes}m`);
  if (rest) parts.push(`${rest}s`);
  return parts.join(' ');
}

module.exports = { formatDuration };
