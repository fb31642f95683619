// The review app's keyboard and saving (see docs/review-app.md); every control also works without it.
"use strict";
